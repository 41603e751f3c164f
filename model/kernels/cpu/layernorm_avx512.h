// AVX-512 row kernels behind LayerNormForward / LayerNormBackward.
//
// Each call handles rows on the calling thread; layernorm.cc splits rows over
// the OpenMP threads and calls these only when Avx512Available().
//
//   if (Avx512Available()) LayerNormRowsForwardAvx512(x, g, b, m, c, y, mu, rs);
//
// Contracts: the same formulas as the scalar reference in layernorm.cc
// (two-pass mean/variance, eps kLayerNormEps) with FP32 lane sums instead of
// double sums, so results agree to ~1e-6 relative; any c >= 1 (tails masked).
// Calling these on a CPU without AVX-512F is undefined (illegal instruction).
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_LAYERNORM_AVX512_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_LAYERNORM_AVX512_H_

#include <cstdint>

namespace zeroshard::kernels::cpu {

// Rows [0, m) of x [m, c]: y, mean[m], rstd[m] written.
void LayerNormRowsForwardAvx512(const float* x, const float* gamma,
                                const float* beta, int64_t m, int64_t c,
                                float* y, float* mean, float* rstd);

// Rows [0, m): dx += (gamma*dy - a - norm*b) * rstd per row.
void LayerNormRowsBackwardDxAvx512(const float* dy, const float* x,
                                   const float* gamma, const float* mean,
                                   const float* rstd, int64_t m, int64_t c,
                                   float* dx);

// Columns [0, c) of dy, x (row stride ld >= c): dgamma[j] += sum_i
// norm[i,j] * dy[i,j], dbeta[j] += sum_i dy[i,j], rows summed in order
// i = 0..m-1 (deterministic).
void LayerNormParamGradsAvx512(const float* dy, const float* x,
                               const float* mean, const float* rstd, int64_t m,
                               int64_t ld, int64_t c, float* dgamma,
                               float* dbeta);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_LAYERNORM_AVX512_H_
