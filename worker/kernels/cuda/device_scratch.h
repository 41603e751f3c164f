// A device buffer that only grows (cudaMalloc), for the scratch of the
// kernels that need one (the linear layer's BF16 gradient, attention's
// scores, the model's staging).
//
//   DeviceScratch s;
//   RETURN_IF_ERROR(s.Reserve(bytes, stream));  // contents undefined
#ifndef ZEROSHARD_WORKER_KERNELS_CUDA_DEVICE_SCRATCH_H_
#define ZEROSHARD_WORKER_KERNELS_CUDA_DEVICE_SCRATCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"

namespace zeroshard::kernels::cuda {

class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  // At least `bytes`; a growth first waits for `stream` (the old buffer may
  // still be in use by work enqueued on it).
  absl::Status Reserve(size_t bytes, cudaStream_t stream);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_WORKER_KERNELS_CUDA_DEVICE_SCRATCH_H_
