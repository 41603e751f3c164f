# zs_server (the shard server library), zeroshard-server (its executable).
add_library(zs_server STATIC
  gather_encoding.cc
  gather_reactor.cc
  kv_store.cc
  kv_wait_reactor.cc
  placement.cc
  push_grad_decoding.cc
  push_grad_reactor.cc
  push_grad_session.cc
  rpc_counters.cc
  set_weights_reactor.cc
  shard_server.cc
  shard_service.cc
  shard_state.cc
  shard_store.cc
  step_tracker.cc
)
target_link_libraries(zs_server PUBLIC
  zs_common zs_common_grpc zs_proto zs_optimizer gRPC::grpc++ absl::span
  absl::function_ref)
if(ZS_HAVE_CUDA)
  target_compile_definitions(zs_server PRIVATE ZS_HAVE_CUDA=1)
  target_link_libraries(zs_server PUBLIC CUDA::cudart)
endif()

add_executable(zeroshard-server main.cc)
target_link_libraries(zeroshard-server PRIVATE zs_server absl::flags
  absl::flags_parse absl::flags_usage)
