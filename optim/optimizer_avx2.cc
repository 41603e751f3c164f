// The AVX2 + FMA Adam kernel (compiled with -mavx2 -mfma -ffp-contract=off):
// 8 elements per iteration; the tail goes to the scalar reference. The
// operations and their order are those of AdamUpdateReference, so results
// are bit-identical, the BF16 mirror included.
#include <immintrin.h>

#include "optim/optimizer_kernels.h"

namespace zeroshard {
namespace {

struct Consts {
  __m256 coef, wd, decay, beta1, beta2, omb1, omb2, bc2, eps, nstep;
};

inline __m256 LoadGrad(GradView grad, size_t i) {
  if (grad.bf16) {
    const uint16_t* g = static_cast<const uint16_t*>(grad.data) + i;
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g));
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  return _mm256_loadu_ps(static_cast<const float*>(grad.data) + i);
}

// Software prefetch distance: 2 KiB of each FP32 array (one line of each
// per 16 elements), as in the AVX-512 kernel.
constexpr size_t kPrefetchElems = 512;

// FloatToBf16 on 8 lanes, packed into 8 uint16 values.
inline __m128i RoundToBf16(__m256 p) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
  const __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(nan));
  // Every lane is < 2^16, so unsigned saturation packs exactly.
  return _mm_packus_epi32(_mm256_castsi256_si128(r),
                          _mm256_extracti128_si256(r, 1));
}

}  // namespace

void AdamUpdateAvx2(const AdamStep& step, GradView grad,
                    const AdamSlice& slice) {
  const Consts c{_mm256_set1_ps(step.coefficient),
                 _mm256_set1_ps(step.weight_decay),
                 _mm256_set1_ps(step.decay),
                 _mm256_set1_ps(step.beta1),
                 _mm256_set1_ps(step.beta2),
                 _mm256_set1_ps(step.one_minus_beta1),
                 _mm256_set1_ps(step.one_minus_beta2),
                 _mm256_set1_ps(step.bias_correction2_sqrt_f),
                 _mm256_set1_ps(step.eps),
                 _mm256_set1_ps(step.neg_step_size)};
  const bool adamw = step.kind == OptimizerKind::kAdamW;
  const bool l2 = !adamw && step.weight_decay != 0.0f;
  const AdamSlice& s = slice;
  const size_t elem = grad.bf16 ? sizeof(uint16_t) : sizeof(float);
  size_t i = 0;
  for (; i + 8 <= s.n; i += 8) {
    if (i + kPrefetchElems < s.n && i % 16 == 0) {
      const size_t j = i + kPrefetchElems;
      _mm_prefetch(reinterpret_cast<const char*>(s.master + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(s.exp_avg + j), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(s.exp_avg_sq + j), _MM_HINT_T0);
      _mm_prefetch(static_cast<const char*>(grad.data) + j * elem, _MM_HINT_T0);
    }
    __m256 g = _mm256_mul_ps(LoadGrad(grad, i), c.coef);
    __m256 p = _mm256_loadu_ps(s.master + i);
    if (l2) g = _mm256_fmadd_ps(p, c.wd, g);
    if (adamw) p = _mm256_mul_ps(p, c.decay);
    const __m256 m = _mm256_fmadd_ps(
        g, c.omb1, _mm256_mul_ps(_mm256_loadu_ps(s.exp_avg + i), c.beta1));
    const __m256 v = _mm256_fmadd_ps(
        _mm256_mul_ps(c.omb2, g), g,
        _mm256_mul_ps(_mm256_loadu_ps(s.exp_avg_sq + i), c.beta2));
    const __m256 denom =
        _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c.bc2), c.eps);
    p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(c.nstep, m), denom));
    _mm256_storeu_ps(s.master + i, p);
    _mm256_storeu_ps(s.exp_avg + i, m);
    _mm256_storeu_ps(s.exp_avg_sq + i, v);
    if (s.mirror != nullptr) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(s.mirror + i),
                       RoundToBf16(p));
    }
  }
  if (i < s.n) {
    const GradView rest{static_cast<const char*>(grad.data) + i * elem,
                        grad.bf16};
    AdamUpdateReference(step, rest,
                        {s.master + i, s.exp_avg + i, s.exp_avg_sq + i,
                         s.mirror != nullptr ? s.mirror + i : nullptr,
                         s.n - i});
  }
}

}  // namespace zeroshard
