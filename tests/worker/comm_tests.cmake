# tests/worker: collectives among workers (worker/comm).
if(TARGET zs_comm)
  add_library(zs_comm_test_store STATIC ${CMAKE_CURRENT_LIST_DIR}/comm_file_store.cc)
  target_link_libraries(zs_comm_test_store PUBLIC zs_common)

  zs_test(NAME comm_gloo_test
          SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_gloo_test.cc
                  ${CMAKE_CURRENT_LIST_DIR}/comm_group_runner.cc
          LIBS zs_comm TIMEOUT 120 LABELS unit)

  # A rank as its own process, started by comm_process_test.
  add_executable(comm_peer ${CMAKE_CURRENT_LIST_DIR}/comm_peer_main.cc)
  set_target_properties(comm_peer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(comm_peer PRIVATE zs_comm zs_comm_test_store)
  zs_test(NAME comm_process_test
          SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_process_test.cc
          LIBS zs_comm zs_comm_test_store TIMEOUT 120 LABELS integration)
  add_dependencies(comm_process_test comm_peer)
  target_compile_definitions(comm_process_test PRIVATE
    ZS_COMM_PEER_BINARY="$<TARGET_FILE:comm_peer>")

  zs_test(NAME comm_nccl_test
          SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_nccl_test.cc
                  ${CMAKE_CURRENT_LIST_DIR}/comm_group_runner.cc
          LIBS zs_comm TIMEOUT 120 LABELS unit)
endif()
