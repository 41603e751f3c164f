# zeroshard-bench step / netstep / memory: whole training steps with
# in-process shard servers (bench/engine_rig.cc) and the LocalTrainer.
# gemm_rate.cc is added by activation.cmake (the GEMM reference rate).
target_sources(zeroshard-bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/engine_rig.cc)
target_link_libraries(zeroshard-bench PRIVATE zs_engine zs_server)
