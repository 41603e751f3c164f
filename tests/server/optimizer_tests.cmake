# Optimizer tests: SIMD kernels vs the scalar reference, the thread pool, and
# golden values from torch (tests/fixtures/adamw_golden.json).
zs_test(NAME optimizer_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/optimizer_test.cc
  LIBS zs_optimizer nlohmann_json::nlohmann_json
  LABELS unit
  TIMEOUT 120)
