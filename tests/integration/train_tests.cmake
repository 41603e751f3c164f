# zeroshard-train tests: output pieces (no processes) and whole runs of the
# real zeroshard-train / -server / -worker binaries on 127.0.0.1.
if(TARGET zs_train)
  zs_test(NAME train_outputs_test SOURCES train_outputs_test.cc
          LIBS zs_train LABELS unit)
endif()
if(TARGET zeroshard-train AND TARGET zeroshard-worker AND
   TARGET zeroshard-server)
  add_library(zs_train_harness STATIC train_harness.cc)
  target_link_libraries(zs_train_harness PUBLIC zs_local_cluster zs_common
    nlohmann_json::nlohmann_json)
  foreach(t train_run_test train_fault_test)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cc)
      zs_test(NAME integration_${t} SOURCES ${t}.cc
              LIBS zs_train_harness zs_local_cluster LABELS integration
              TIMEOUT 900)
      add_dependencies(integration_${t} zeroshard-train zeroshard-server
                       zeroshard-worker)
    endif()
  endforeach()
endif()
