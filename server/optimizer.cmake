# zs_optimizer: the Adam update (server/optimizer*.cc).
#
# Every optimizer source is compiled with -ffp-contract=off so that the only
# fused multiply-adds are the explicit ones (the reference and the SIMD
# kernels must agree bit for bit). The SIMD kernels get their ISA flags per
# file and are left out when the compiler lacks them; dispatch happens at run
# time, so the library itself targets the baseline CPU.
include(CheckCXXCompilerFlag)
set(ZS_OPT_DIR ${CMAKE_CURRENT_SOURCE_DIR})
set(ZS_OPT_SOURCES
  ${ZS_OPT_DIR}/optimizer.cc
  ${ZS_OPT_DIR}/optimizer_pool.cc
  ${ZS_OPT_DIR}/optimizer_ref.cc)
set(ZS_OPT_DEFS)
check_cxx_compiler_flag("-mavx512f -mavx512bw -mavx512vl" ZS_CXX_HAS_AVX512)
check_cxx_compiler_flag("-mavx2 -mfma" ZS_CXX_HAS_AVX2)
if(ZS_CXX_HAS_AVX512)
  list(APPEND ZS_OPT_SOURCES ${ZS_OPT_DIR}/optimizer_avx512.cc)
  # -Wno-maybe-uninitialized: GCC 12 warns inside its own _mm512_undefined_*.
  set_source_files_properties(${ZS_OPT_DIR}/optimizer_avx512.cc PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-Wno-maybe-uninitialized")
  list(APPEND ZS_OPT_DEFS ZS_HAVE_AVX512_KERNEL)
endif()
if(ZS_CXX_HAS_AVX2)
  list(APPEND ZS_OPT_SOURCES ${ZS_OPT_DIR}/optimizer_avx2.cc)
  set_source_files_properties(${ZS_OPT_DIR}/optimizer_avx2.cc PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma")
  list(APPEND ZS_OPT_DEFS ZS_HAVE_AVX2_KERNEL)
endif()
message(STATUS "zeroshard: optimizer kernels avx512=${ZS_CXX_HAS_AVX512} avx2=${ZS_CXX_HAS_AVX2}")

add_library(zs_optimizer STATIC ${ZS_OPT_SOURCES})
target_compile_options(zs_optimizer PRIVATE -ffp-contract=off)
target_compile_definitions(zs_optimizer PRIVATE ${ZS_OPT_DEFS})
target_link_libraries(zs_optimizer PUBLIC zs_common absl::synchronization absl::function_ref
  absl::strings Threads::Threads)
