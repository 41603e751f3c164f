# Config, loss scaler and gradient clipping tests (engineer "config").
zs_test(NAME config_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/config_test.cc
  LIBS zs_common
  LABELS unit
  TIMEOUT 60)
zs_test(NAME loss_scaler_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/loss_scaler_test.cc
  LIBS zs_common
  LABELS unit
  TIMEOUT 60)
zs_test(NAME grad_clip_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/grad_clip_test.cc
  LIBS zs_common nlohmann_json::nlohmann_json
  LABELS unit
  TIMEOUT 60)
