#include "model/kernels/cpu/layernorm_avx512.h"

// GCC 12 flags the deliberately undefined vectors inside its own AVX-512
// intrinsics (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "model/kernels/cpu/layernorm.h"

#define ZS_AVX512 __attribute__((target("avx512f")))

namespace zeroshard::kernels::cpu {
namespace {

// Lane mask for columns [j, min(j + 16, c)).
ZS_AVX512 inline __mmask16 MaskAt(int64_t j, int64_t c) {
  const int64_t left = c - j;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF)
                    : static_cast<__mmask16>((1u << left) - 1);
}

}  // namespace

ZS_AVX512 void LayerNormRowsForwardAvx512(const float* x, const float* gamma,
                                          const float* beta, int64_t m,
                                          int64_t c, float* y, float* mean,
                                          float* rstd) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * c;
    float* yi = y + i * c;
    __m512 s = _mm512_setzero_ps();
    for (int64_t j = 0; j < c; j += 16) {
      s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(MaskAt(j, c), xi + j));
    }
    const float mu = _mm512_reduce_add_ps(s) / static_cast<float>(c);
    const __m512 vmu = _mm512_set1_ps(mu);
    __m512 v = _mm512_setzero_ps();
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = MaskAt(j, c);
      const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, xi + j), vmu);
      v = _mm512_fmadd_ps(d, d, v);
    }
    const float var = _mm512_reduce_add_ps(v) / static_cast<float>(c);
    const float rs = 1.0f / std::sqrt(var + kLayerNormEps);
    const __m512 vrs = _mm512_set1_ps(rs);
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = MaskAt(j, c);
      const __m512 norm =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xi + j), vmu), vrs);
      const __m512 out = _mm512_fmadd_ps(norm, _mm512_maskz_loadu_ps(k, gamma + j),
                                         _mm512_maskz_loadu_ps(k, beta + j));
      _mm512_mask_storeu_ps(yi + j, k, out);
    }
    mean[i] = mu;
    rstd[i] = rs;
  }
}

ZS_AVX512 void LayerNormRowsBackwardDxAvx512(const float* dy, const float* x,
                                             const float* gamma,
                                             const float* mean,
                                             const float* rstd, int64_t m,
                                             int64_t c, float* dx) {
  for (int64_t i = 0; i < m; ++i) {
    const float* dyi = dy + i * c;
    const float* xi = x + i * c;
    float* dxi = dx + i * c;
    const __m512 vmu = _mm512_set1_ps(mean[i]);
    const __m512 vrs = _mm512_set1_ps(rstd[i]);
    __m512 sa = _mm512_setzero_ps(), sb = _mm512_setzero_ps();
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = MaskAt(j, c);
      const __m512 norm =
          _mm512_mul_ps(_mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, xi + j), vmu), vrs);
      const __m512 dnorm = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, gamma + j),
                                         _mm512_maskz_loadu_ps(k, dyi + j));
      sa = _mm512_add_ps(sa, dnorm);
      sb = _mm512_fmadd_ps(dnorm, norm, sb);
    }
    const __m512 va = _mm512_set1_ps(_mm512_reduce_add_ps(sa) / static_cast<float>(c));
    const __m512 vb = _mm512_set1_ps(_mm512_reduce_add_ps(sb) / static_cast<float>(c));
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = MaskAt(j, c);
      const __m512 norm =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xi + j), vmu), vrs);
      const __m512 dnorm = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, gamma + j),
                                         _mm512_maskz_loadu_ps(k, dyi + j));
      const __m512 t = _mm512_fnmadd_ps(norm, vb, _mm512_sub_ps(dnorm, va));
      const __m512 out = _mm512_fmadd_ps(t, vrs, _mm512_maskz_loadu_ps(k, dxi + j));
      _mm512_mask_storeu_ps(dxi + j, k, out);
    }
  }
}

ZS_AVX512 void LayerNormParamGradsAvx512(const float* dy, const float* x,
                                         const float* mean, const float* rstd,
                                         int64_t m, int64_t ld, int64_t c,
                                         float* dgamma, float* dbeta) {
  // Column blocks outermost so each block's accumulators stay in registers.
  for (int64_t j = 0; j < c; j += 16) {
    const __mmask16 k = MaskAt(j, c);
    __m512 g = _mm512_maskz_loadu_ps(k, dgamma + j);
    __m512 b = _mm512_maskz_loadu_ps(k, dbeta + j);
    for (int64_t i = 0; i < m; ++i) {
      const __m512 d = _mm512_maskz_loadu_ps(k, dy + i * ld + j);
      const __m512 norm = _mm512_mul_ps(
          _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i * ld + j), _mm512_set1_ps(mean[i])),
          _mm512_set1_ps(rstd[i]));
      g = _mm512_fmadd_ps(norm, d, g);
      b = _mm512_add_ps(b, d);
    }
    _mm512_mask_storeu_ps(dgamma + j, k, g);
    _mm512_mask_storeu_ps(dbeta + j, k, b);
  }
}

}  // namespace zeroshard::kernels::cpu
