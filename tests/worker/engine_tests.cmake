# tests/worker: the step engine (worker/engine) against in-process shard
# servers and worker threads (engine_cluster.h).
if(TARGET zs_engine AND TARGET zs_server)
  zs_test(NAME engine_test
          SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_cluster.cc
                  ${CMAKE_CURRENT_LIST_DIR}/engine_parity_test.cc
                  ${CMAKE_CURRENT_LIST_DIR}/engine_step_test.cc
          LIBS zs_engine zs_server TIMEOUT 240 LABELS integration)
endif()
