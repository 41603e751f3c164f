#include "worker/kernels/cuda/device_scratch.h"

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"

namespace zeroshard::kernels::cuda {

DeviceScratch::~DeviceScratch() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::Status DeviceScratch::Reserve(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_) return absl::OkStatus();
  if (data_ != nullptr) {
    const absl::Status s =
        CudaStatus(cudaStreamSynchronize(stream), "DeviceScratch: waiting");
    if (!s.ok()) return s;
    cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  const absl::Status s = CudaStatus(
      cudaMalloc(&data_, bytes),
      absl::StrCat("DeviceScratch: allocating ", bytes, " bytes"));
  if (!s.ok()) return s;
  bytes_ = bytes;
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cuda
