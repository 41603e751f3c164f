# zeroshard-bench adam: links the optimizer.
target_link_libraries(zeroshard-bench PRIVATE zs_optimizer)
