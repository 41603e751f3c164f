// LayerNorm over the last dimension (eps 1e-5, biased variance, as torch).
//
//   LayerNormForward(x, gamma, beta, M, C, y, mean, rstd);
//   LayerNormBackward(dy, x, gamma, mean, rstd, M, C, dx, dgamma, dbeta);
//
// All FP32. mean and rstd ([M] each) are saved by the forward for the
// backward. dx is ACCUMULATED (+=): in a pre-LN block it adds into the
// residual stream's gradient. dgamma, dbeta are accumulated.
//
// The fast path runs AVX-512 row kernels (layernorm_avx512.h) when the CPU
// has them, FP32 lane sums; the *Reference functions are the portable scalar
// loops (double sums), used otherwise and by the tests. Both are
// deterministic: the same inputs give the same bits for any thread count.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_LAYERNORM_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_LAYERNORM_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

inline constexpr float kLayerNormEps = 1e-5f;

absl::Status LayerNormForward(const float* x, const float* gamma,
                              const float* beta, int64_t m, int64_t c, float* y,
                              float* mean, float* rstd);

absl::Status LayerNormBackward(const float* dy, const float* x,
                               const float* gamma, const float* mean,
                               const float* rstd, int64_t m, int64_t c,
                               float* dx, float* dgamma, float* dbeta);

absl::Status LayerNormForwardReference(const float* x, const float* gamma,
                                       const float* beta, int64_t m, int64_t c,
                                       float* y, float* mean, float* rstd);

absl::Status LayerNormBackwardReference(const float* dy, const float* x,
                                        const float* gamma, const float* mean,
                                        const float* rstd, int64_t m, int64_t c,
                                        float* dx, float* dgamma, float* dbeta);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_LAYERNORM_H_
