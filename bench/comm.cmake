# zeroshard-bench comm: worker collectives (worker/comm), when Gloo is found.
if(TARGET zs_comm)
  target_link_libraries(zeroshard-bench PRIVATE zs_comm)
  target_compile_definitions(zeroshard-bench PRIVATE ZS_BENCH_HAVE_COMM=1)
endif()
