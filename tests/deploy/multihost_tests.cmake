# tests/deploy/multihost_tests.cmake, included by tests/deploy/CMakeLists.txt:
# the multi-host run (multihost_run.sh): shard servers and workers each in
# its own network namespace, started with the cpu-demo overlay's commands,
# flags and config over mutual TLS, one server cut off midway. Needs root
# (skips with 77 otherwise). With ZS_IMAGE_ROOT set in the environment (the
# server image's root, deploy/docker/image-root.sh) the servers run from the
# image. RUN_SERIAL: it trains with four processes on the machine's cores.
add_test(NAME deploy_multihost_run_test
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/multihost_run.sh
          $<TARGET_FILE_DIR:zeroshard-server>
          ${CMAKE_SOURCE_DIR}/deploy/k8s/overlays/cpu-demo)
set_tests_properties(deploy_multihost_run_test PROPERTIES
  LABELS "integration;multihost" TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
