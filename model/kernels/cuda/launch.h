// Internal to model/kernels/cuda: launch geometry and argument checks shared
// by the launchers.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_LAUNCH_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"

namespace zeroshard::kernels::cuda {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any current
// device several times, at most 65536 (the loop covers the rest).
inline unsigned GridFor(int64_t n) {
  const int64_t want = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(want < 1 ? 1 : (want > 65536 ? 65536 : want));
}

// n >= 0, and every pointer non-null when n > 0.
inline absl::Status CheckElementwise(const char* op, int64_t n,
                                     std::initializer_list<const void*> ptrs) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": n must not be negative (n=", n, ")"));
  }
  if (n == 0) return absl::OkStatus();
  int i = 0;
  for (const void* p : ptrs) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": pointer argument ", i, " is null (n=", n, ")"));
    }
    ++i;
  }
  return absl::OkStatus();
}

// The launch's own error (bad configuration, no device), as a Status.
inline absl::Status LaunchStatus(const char* op) {
  return CudaStatus(cudaGetLastError(), absl::StrCat(op, ": launch"));
}

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_LAUNCH_H_
