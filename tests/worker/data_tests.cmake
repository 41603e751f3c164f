# Corpus and batch sampler tests (engineer "config").
zs_test(NAME data_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data_test.cc
  LIBS zs_data
  LABELS unit
  TIMEOUT 60)
