# zeroshard-bench activation / gemm: the GPT model (worker/model) and the
# matrix-product rate; OpenBLAS linked explicitly (never the reference
# libblas.so.3) for the gemm comparison.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZS_OPENBLAS REQUIRED IMPORTED_TARGET openblas)
target_sources(zeroshard-bench PRIVATE ${CMAKE_CURRENT_LIST_DIR}/gemm_rate.cc)
target_link_libraries(zeroshard-bench PRIVATE zs_model PkgConfig::ZS_OPENBLAS)
