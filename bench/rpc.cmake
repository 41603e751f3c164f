# zeroshard-bench rpc: the client library; spawns zeroshard-server from bin/.
target_link_libraries(zeroshard-bench PRIVATE zs_client)
if(TARGET zeroshard-server)
  add_dependencies(zeroshard-bench zeroshard-server)
endif()
