# zeroshard-bench memory: uses bench/engine_rig.cc and the libraries that
# step.cmake links (zs_engine, zs_server).
