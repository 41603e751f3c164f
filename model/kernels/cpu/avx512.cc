#include "model/kernels/cpu/avx512.h"

// GCC 12 flags the deliberately undefined vectors inside its own AVX-512
// intrinsics (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "model/kernels/element_math.h"

#define ZS_AVX512 __attribute__((target("avx512f")))

namespace zeroshard::kernels::cpu {
namespace {

// exp(x), the algorithm of elementwise.cc's ExpNoCall on 16 lanes: clamp to
// [-87, 88], x = n ln2 + r, degree-6 Taylor polynomial of e^r, times 2^n.
ZS_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f));
  const __m512i n = _mm512_sub_epi32(
      _mm512_cvttps_epi32(_mm512_add_ps(t, _mm512_set1_ps(126.5f))),
      _mm512_set1_epi32(126));
  const __m512 fn = _mm512_cvtepi32_ps(n);
  __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512 scale = _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
  return _mm512_mul_ps(p, scale);
}

// tanh(u) = 1 - 2 / (e^{2u} + 1), |u| clamped at 20.
ZS_AVX512 inline __m512 Tanh16(__m512 u) {
  u = _mm512_min_ps(_mm512_max_ps(u, _mm512_set1_ps(-20.0f)), _mm512_set1_ps(20.0f));
  const __m512 e = Exp16(_mm512_add_ps(u, u));
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

// u = sqrt(2/pi) (x + 0.044715 x^3).
ZS_AVX512 inline __m512 GeluArg16(__m512 v) {
  const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
  return _mm512_mul_ps(_mm512_set1_ps(kGeluScale),
                       _mm512_fmadd_ps(_mm512_set1_ps(kGeluCube), v3, v));
}

ZS_AVX512 inline __m512 GeluForward16(__m512 v) {
  const __m512 t = Tanh16(GeluArg16(v));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), t));
}

ZS_AVX512 inline __m512 GeluBackward16(__m512 v, __m512 dy) {
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  const __m512 t = Tanh16(GeluArg16(v));
  const __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
  const __m512 du = _mm512_mul_ps(
      _mm512_set1_ps(kGeluScale),
      _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kGeluCube), _mm512_mul_ps(v, v), one));
  const __m512 left = _mm512_mul_ps(half, _mm512_add_ps(one, t));
  const __m512 right = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, v), sech2), du);
  return _mm512_mul_ps(dy, _mm512_add_ps(left, right));
}

ZS_AVX512 inline __mmask16 TailMask(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1u);
}

ZS_AVX512 inline __m256i ToBf16x16(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
}

bool Detect() {
  const char* off = std::getenv("ZS_NO_AVX512");
  if (off != nullptr && off[0] != '\0' && off[0] != '0') return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

bool Avx512Available() {
  static const bool available = Detect();
  return available;
}

ZS_AVX512 void GeluForwardAvx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, GeluForward16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

ZS_AVX512 void GeluBackwardAvx512(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dx + i, m,
                          GeluBackward16(_mm512_maskz_loadu_ps(m, x + i),
                                         _mm512_maskz_loadu_ps(m, dy + i)));
  }
}

ZS_AVX512 void FloatToBf16Avx512(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        ToBf16x16(_mm512_loadu_ps(in + i)));
  }
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    const __m512i wide = _mm512_cvtepu16_epi32(ToBf16x16(_mm512_maskz_loadu_ps(m, in + i)));
    _mm512_mask_cvtepi32_storeu_epi16(out + i, m, wide);
  }
}

ZS_AVX512 void Bf16ToFloatAvx512(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

ZS_AVX512 void SwiGluForwardAvx512(const float* gate, const float* up, float* out,
                                   int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, u));
  }
}

ZS_AVX512 void SwiGluBackwardAvx512(const float* gate, const float* up, const float* da,
                                    float* dgate, float* dup, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 d = _mm512_maskz_loadu_ps(m, da + i);
    const __m512 den = _mm512_add_ps(one, Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    const __m512 s = _mm512_div_ps(one, den);
    // d gate = da * up * s (1 + g (1 - s)); d up = da * g / den.
    const __m512 ds = _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
    _mm512_mask_storeu_ps(dgate + i, m, _mm512_mul_ps(_mm512_mul_ps(d, u), ds));
    _mm512_mask_storeu_ps(dup + i, m, _mm512_mul_ps(d, _mm512_div_ps(g, den)));
  }
}

ZS_AVX512 float ScaledExpRowAvx512(float* row, int64_t n, float scale) {
  if (n <= 0) return 0.0f;
  const __m512 s = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    mx = _mm512_mask_max_ps(mx, m, mx, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + i), s));
  }
  const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 e = Exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, row + i), s, vmax));
    _mm512_mask_storeu_ps(row + i, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

}  // namespace zeroshard::kernels::cpu
