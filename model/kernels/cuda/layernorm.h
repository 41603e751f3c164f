// LayerNorm over the last dimension on a CUDA device (eps 1e-5, biased
// variance, as torch): the CPU op's contract (model/kernels/cpu/
// layernorm.h) with device pointers and a stream. One block per row; the
// row sums are a block's float tree (cub::BlockReduce), the per-element
// arithmetic model/kernels/element_math.h's, as LayerNormForwardTwin runs it.
//
//   RETURN_IF_ERROR(cuda::LayerNormForward(x, g, b, M, C, y, mean, rstd, s));
//   RETURN_IF_ERROR(cuda::LayerNormBackward(dy, x, g, mean, rstd, M, C,
//                                           dx, dgamma, dbeta, s));
//
// The backward ACCUMULATES dx, dgamma and dbeta. dgamma and dbeta are summed
// over rows deterministically (per-block partial sums in a stream-ordered
// scratch buffer, then a fixed-order sum per channel): the same inputs give
// the same bits on the same device.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_LAYERNORM_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_LAYERNORM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cuda {

absl::Status LayerNormForward(const float* x, const float* gamma,
                              const float* beta, int64_t m, int64_t c,
                              float* y, float* mean, float* rstd,
                              cudaStream_t stream);

absl::Status LayerNormBackward(const float* dy, const float* x,
                               const float* gamma, const float* mean,
                               const float* rstd, int64_t m, int64_t c,
                               float* dx, float* dgamma, float* dbeta,
                               cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_LAYERNORM_H_
