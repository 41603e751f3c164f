// Llama's ops on a CUDA device: the CPU ops' contracts (model/kernels/cpu/
// rmsnorm.h, rope.h, swiglu.h, grouped_qkv.h) with device pointers and a
// stream. The per-element arithmetic is model/kernels/llama_math.h's; a
// row's sums are a block's float tree (cub::BlockReduce). RMSNorm's gain
// gradient is summed over rows by one thread per channel in row order, as
// its CPU twin (RmsNormBackwardTwin) does, so it is the same on every run.
// The rotary table (cos, sin: [seq, head_dim / 2]) is on the device.
//
//   RETURN_IF_ERROR(cuda::RmsNormForward(x, g, M, C, eps, y, rstd, stream));
//   RETURN_IF_ERROR(cuda::RopeApply(cos, sin, T, d, q, M, heads, stride,
//                                   /*inverse=*/false, stream));
//
// Not yet run on a device (docs/GPU.md); sizes and pointers are checked
// before any launch.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_LLAMA_OPS_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_LLAMA_OPS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "model/kernels/cpu/grouped_qkv.h"

namespace zeroshard::kernels::cuda {

absl::Status RmsNormForward(const float* x, const float* g, int64_t m, int64_t c,
                            float eps, float* y, float* rstd, cudaStream_t stream);
// dx and dg accumulated (+=).
absl::Status RmsNormBackward(const float* dy, const float* x, const float* g,
                             const float* rstd, int64_t m, int64_t c, float* dx,
                             float* dg, cudaStream_t stream);

// In place: rows of `stride` values, position = row % seq, the first
// `heads` heads of head_dim rotated (inverse: the backward's rotation).
absl::Status RopeApply(const float* cos, const float* sin, int64_t seq,
                       int64_t head_dim, float* x, int64_t m, int64_t heads,
                       int64_t stride, bool inverse, cudaStream_t stream);

absl::Status SwiGluForward(const float* gu, int64_t m, int64_t f, float* a,
                           cudaStream_t stream);
absl::Status SwiGluBackward(const float* gu, const float* da, int64_t m, int64_t f,
                            float* dgu, cudaStream_t stream);

absl::Status ExpandGroupedQkv(const cpu::GroupedQkv& g, const float* compact,
                              int64_t m, float* expanded, cudaStream_t stream);
absl::Status ReduceGroupedQkvGrad(const cpu::GroupedQkv& g, const float* dexpanded,
                                  int64_t m, float* dcompact, cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_LLAMA_OPS_H_
