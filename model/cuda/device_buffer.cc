#include "model/cuda/device_buffer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "model/kernels/cuda/elementwise.h"

namespace zeroshard::model {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(ActivationMemory* mem,
                                                    DType dtype, int64_t n,
                                                    cudaStream_t stream) {
  if (dtype != DType::kFp32 && dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceBuffer: dtype ", DTypeName(dtype), " (want fp32 or bf16)"));
  }
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceBuffer: negative size ", n));
  }
  DeviceBuffer b;
  b.dtype_ = dtype;
  b.stream_ = stream;
  if (n == 0) return b;
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype);
  const absl::Status s = CudaStatus(
      cudaMallocAsync(&b.data_, bytes, stream),
      absl::StrCat("allocating ", bytes, " bytes of device activations"));
  if (!s.ok()) return s;
  b.n_ = n;
  b.mem_ = mem;
  if (mem != nullptr) mem->Add(b.bytes());
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    n_ = std::exchange(o.n_, 0);
    dtype_ = o.dtype_;
    mem_ = std::exchange(o.mem_, nullptr);
    stream_ = o.stream_;
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  if (mem_ != nullptr) mem_->Remove(bytes());
  cudaFreeAsync(data_, stream_);  // an error here means the context is lost
  data_ = nullptr;
  n_ = 0;
  mem_ = nullptr;
}

absl::Status DeviceBuffer::FromFloat(const float* in) {
  if (dtype_ == DType::kBf16) {
    return kernels::cuda::FloatsToBf16(in, static_cast<uint16_t*>(data_), n_,
                                       stream_);
  }
  if (n_ == 0 || in == data_) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(data_, in, bytes(),
                                    cudaMemcpyDeviceToDevice, stream_),
                    "DeviceBuffer::FromFloat");
}

absl::Status DeviceBuffer::ToFloat(float* out) const {
  if (dtype_ == DType::kBf16) {
    return kernels::cuda::Bf16sToFloat(static_cast<const uint16_t*>(data_),
                                       out, n_, stream_);
  }
  if (n_ == 0 || out == data_) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(out, data_, bytes(),
                                    cudaMemcpyDeviceToDevice, stream_),
                    "DeviceBuffer::ToFloat");
}

absl::Status DeviceBuffer::StoreRounded(float* v) {
  if (absl::Status s = FromFloat(v); !s.ok()) return s;
  if (dtype_ == DType::kBf16) return ToFloat(v);
  return absl::OkStatus();
}

}  // namespace zeroshard::model
