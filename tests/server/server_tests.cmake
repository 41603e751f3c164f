# Shard server tests: units without gRPC, and the server over real gRPC
# (in process, and the zeroshard-server executable).
zs_test(NAME server_unit_test
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/step_tracker_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/gather_encoding_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/kv_store_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/push_grad_decoding_test.cc
  LIBS zs_server
  LABELS unit)

add_library(zs_server_test_util STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/server_test_util.cc)
target_link_libraries(zs_server_test_util PUBLIC zs_server GTest::gtest)

zs_test(NAME server_rpc_test
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/shard_server_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/bad_input_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/server_binary_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/push_grad_session_test.cc
  LIBS zs_server_test_util zs_server
  LABELS integration
  TIMEOUT 120)
add_dependencies(server_rpc_test zeroshard-server)
