// A device buffer that only grows (cudaMalloc), for scratch that CUDA code
// reuses call after call: the kernels' (the linear layer's BF16 gradient,
// attention's scores, the model's staging) and the host-staged NCCL group's
// staging (comm/nccl_host_group.cc). CUDA builds only, like
// common/cuda_status.h (the Bazel build leaves it out of common's headers).
//
//   DeviceScratch s;
//   RETURN_IF_ERROR(s.Reserve(bytes, stream));  // contents undefined
#ifndef ZEROSHARD_COMMON_DEVICE_SCRATCH_H_
#define ZEROSHARD_COMMON_DEVICE_SCRATCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"

namespace zeroshard {

// Gives back to the device what the current device's stream-ordered pool
// keeps: allocations freed with cudaFreeAsync whose frees have run. The
// device model keeps its activations there between steps
// (model/cuda/device_gpt.cc), so a plain cudaMalloc that finds the
// device full calls this and tries once more, and the model calls it when
// it goes.
inline void TrimStreamOrderedPool() {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    cudaMemPoolTrimTo(pool, 0);
  }
  (void)cudaGetLastError();
}

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes`; a growth first waits for `stream` (the old buffer may
  // still be in use by work enqueued on it).
  absl::Status Reserve(size_t bytes, cudaStream_t stream) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (data_ != nullptr) {
      const absl::Status s =
          CudaStatus(cudaStreamSynchronize(stream), "DeviceScratch: waiting");
      if (!s.ok()) return s;
      cudaFree(data_);
      data_ = nullptr;
      bytes_ = 0;
    }
    cudaError_t e = cudaMalloc(&data_, bytes);
    if (e == cudaErrorMemoryAllocation) {
      // What the stream-ordered pool keeps goes back first, once.
      (void)cudaGetLastError();
      if (cudaStreamSynchronize(stream) == cudaSuccess) {
        TrimStreamOrderedPool();
        e = cudaMalloc(&data_, bytes);
      }
    }
    if (e != cudaSuccess) {
      data_ = nullptr;
      (void)cudaGetLastError();
    }
    const absl::Status s = CudaStatus(
        e, absl::StrCat("DeviceScratch: allocating ", bytes, " bytes"));
    if (!s.ok()) return s;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_DEVICE_SCRATCH_H_
