// For the device tests (CUDA builds only): whether a CUDA device is there,
// and a skip that says why not, so the test output of a machine without a
// GPU states plainly that the device comparison did not run.
//
// With ZS_EXPECT_CUDA_DEVICE=1 in the environment (tests/gpu/device_check.sh
// sets it on a machine whose nvidia-smi lists a GPU) a missing device fails
// the test instead: on a GPU machine a runtime that sees no device is the
// fault to report, not a reason to skip.
//
//   TEST(FooCudaTest, MatchesTheCpuTwin) {
//     ZS_SKIP_WITHOUT_CUDA_DEVICE();
//     ...
//   }
#ifndef ZEROSHARD_TESTS_SUPPORT_CUDA_DEVICE_H_
#define ZEROSHARD_TESTS_SUPPORT_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace zeroshard::testing {

// Empty when a device is usable; otherwise why not (the CUDA error).
inline std::string NoCudaDeviceReason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  if (count <= 0) return "0 CUDA devices";
  return "";
}

// ZS_EXPECT_CUDA_DEVICE=1: a device must be there.
inline bool CudaDeviceExpected() {
  const char* v = std::getenv("ZS_EXPECT_CUDA_DEVICE");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace zeroshard::testing

#define ZS_SKIP_WITHOUT_CUDA_DEVICE()                                        \
  do {                                                                       \
    const std::string zs_no_device = ::zeroshard::testing::NoCudaDeviceReason(); \
    if (!zs_no_device.empty() &&                                             \
        ::zeroshard::testing::CudaDeviceExpected()) {                        \
      GTEST_FAIL() << "no CUDA device (" << zs_no_device                     \
                   << ") although ZS_EXPECT_CUDA_DEVICE=1";                  \
    }                                                                        \
    if (!zs_no_device.empty()) {                                             \
      GTEST_SKIP() << "no CUDA device (" << zs_no_device                     \
                   << "): the device kernel was not run; tests/gpu/"         \
                      "device_check.sh runs it on a GPU machine";            \
    }                                                                        \
  } while (0)

#endif  // ZEROSHARD_TESTS_SUPPORT_CUDA_DEVICE_H_
