// Elementwise ops on a CUDA device: GELU forward and backward, the residual
// add, FP32 <-> BF16 casts and the accumulation of gradients. Device
// pointers, enqueued on `stream`; per element they run model/kernels/
// element_math.h and common/bf16_bits.h, as their CPU twins do
// (model/kernels/cpu/twins.h; the casts' twins are common/dtype.h's).
//
//   RETURN_IF_ERROR(cuda::GeluForward(d_h, d_g, n, stream));
//
// n < 0 or a null pointer with n > 0 is INVALID_ARGUMENT (nothing enqueued);
// a launch failure is the CUDA error.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_ELEMENTWISE_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cuda {

absl::Status GeluForward(const float* x, float* y, int64_t n,
                         cudaStream_t stream);
// dx = dy * gelu'(x), written.
absl::Status GeluBackward(const float* x, const float* dy, float* dx,
                          int64_t n, cudaStream_t stream);
// out = a + b.
absl::Status ResidualForward(const float* a, const float* b, float* out,
                             int64_t n, cudaStream_t stream);
// Round to nearest even; NaN stays NaN.
absl::Status FloatsToBf16(const float* in, uint16_t* out, int64_t n,
                          cudaStream_t stream);
absl::Status Bf16sToFloat(const uint16_t* in, float* out, int64_t n,
                          cudaStream_t stream);
// dst += scale * src (the grad shard's accumulation over micro-batches).
absl::Status AccumulateScaled(const float* src, float scale, float* dst,
                              int64_t n, cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_ELEMENTWISE_H_
