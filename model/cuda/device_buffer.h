// Activation storage on a CUDA device, with the byte accounting of
// model/activation_buffer.h (the same ActivationMemory, so the peak a
// policy holds is reported alike on both paths).
//
// Stream-ordered: allocated with cudaMallocAsync and freed with
// cudaFreeAsync on the stream given at allocation (the model's compute
// stream), so that reuse follows the stream's order and costs no device
// synchronization.
//
//   ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::Allocate(&mem,
//                    DType::kBf16, M * C, stream));
//   RETURN_IF_ERROR(x.FromFloat(d_values));  // rounds to BF16 on the device
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_BUFFER_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "model/activation_buffer.h"

namespace zeroshard::model {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // n elements of dtype (kFp32 or kBf16); `mem` may be null (untracked).
  static absl::StatusOr<DeviceBuffer> Allocate(ActivationMemory* mem,
                                               DType dtype, int64_t n,
                                               cudaStream_t stream);
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = static_cast<DeviceBuffer&&>(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Release();
  bool empty() const { return n_ == 0; }
  int64_t size() const { return n_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return n_ * static_cast<int64_t>(DTypeSize(dtype_)); }
  void* data() { return data_; }
  const void* data() const { return data_; }
  float* f32() { return static_cast<float*>(data_); }  // kFp32 only
  const float* f32() const { return static_cast<const float*>(data_); }

  // Stores n device floats (rounding to BF16 when the buffer is BF16), and
  // the reverse; enqueued on the buffer's stream.
  absl::Status FromFloat(const float* in);
  absl::Status ToFloat(float* out) const;
  // FromFloat(v), then v rounded to what was stored (BF16: v's values as
  // the buffer now holds them), as the CPU blocks' StoreRounded.
  absl::Status StoreRounded(float* v);

 private:
  void* data_ = nullptr;
  int64_t n_ = 0;
  DType dtype_ = DType::kFp32;
  ActivationMemory* mem_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_BUFFER_H_
