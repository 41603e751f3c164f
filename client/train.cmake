# zeroshard-train: the launcher (client/train/). Included from
# client/CMakeLists.txt. It spawns zeroshard-server and zeroshard-worker from
# its own bin directory, so building it builds them too.
add_library(zs_train STATIC
  train/loss_plot.cc
  train/metrics_writer.cc
  train/progress_bar.cc
  train/run_summary.cc
  train/step_record.cc
  train/train_cluster.cc
  train/train_run.cc
  train/weights_export.cc
)
target_link_libraries(zs_train PUBLIC zs_client zs_common
  nlohmann_json::nlohmann_json absl::time absl::str_format)

add_executable(zeroshard-train train/train_main.cc)
target_link_libraries(zeroshard-train PRIVATE zs_train absl::flags
  absl::flags_parse absl::flags_usage)
# The worker is defined after client/ (worker/ is added later): its
# dependency is added from tests/integration/train_tests.cmake and at the end
# of this configure via cmake_language(DEFER).
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL
  _zs_train_add_runtime_deps)
function(_zs_train_add_runtime_deps)
  foreach(dep zeroshard-server zeroshard-worker)
    if(TARGET ${dep})
      add_dependencies(zeroshard-train ${dep})
    endif()
  endforeach()
endfunction()
