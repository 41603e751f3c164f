// AVX-512 lane helpers shared by the optimizer rules' kernels (AdamW's in
// optimizer_avx512.cc, Lion's in lion.cc, 8-bit AdamW's in
// adam8bit_avx512.cc): the gradient's load, the BF16 mirror's rounding and
// AdamW's update of 16 elements. Marked with the target attribute, so a file compiled
// for the baseline CPU may call them from its own AVX-512 functions; call
// only where the CPU has AVX-512 F, BW and VL.
//
// Always inlined, never called: a __m512 argument or result travels in a
// zmm register in a file compiled with -mavx512f but in memory in one
// compiled for the baseline (the ABI follows the file's flags, not the
// attribute), so one out-of-line copy, which the linker would pick from
// either file, is wrong for the other's callers. clang at -O0, which
// inlines nothing else, gave AdamW's mirror Lion's copy of the rounding.
#ifndef ZEROSHARD_OPTIM_AVX512_LANES_H_
#define ZEROSHARD_OPTIM_AVX512_LANES_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "optim/optimizer.h"

#define ZS_AVX512_LANES __attribute__((target("avx512f,avx512bw,avx512vl")))
#define ZS_AVX512_LANES_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline))

namespace zeroshard {

// 16 gradient elements at i, FP32 or BF16 widened exactly (lanes outside
// `mask` read as 0).
ZS_AVX512_LANES_INLINE inline __m512 LoadGrad16(GradView grad, size_t i,
                                                __mmask16 mask) {
  if (grad.bf16) {
    const uint16_t* g = static_cast<const uint16_t*>(grad.data) + i;
    const __m256i h = _mm256_maskz_loadu_epi16(mask, g);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(grad.data) + i);
}

// FloatToBf16 on 16 lanes (round to nearest even on the bits; a NaN stays a
// quiet NaN), in the low half of each 32-bit lane. Not vcvtneps2bf16, which
// flushes subnormal inputs to zero.
ZS_AVX512_LANES_INLINE inline __m512i RoundToBf16x16(__m512 p) {
  const __m512i u = _mm512_castps_si512(p);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb);
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x0040));
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

// AdamW's (and Adam's) per-step constants in registers.
struct AdamLaneConsts {
  __m512 coef, wd, decay, beta1, beta2, omb1, omb2, bc2, eps, nstep;
  bool adamw = true;  // decoupled decay
  bool l2 = false;    // Adam's L2 term (weight_decay != 0)
};

ZS_AVX512_LANES_INLINE inline AdamLaneConsts AdamLaneConstsOf(
    const AdamStep& step) {
  AdamLaneConsts c{_mm512_set1_ps(step.coefficient),
                   _mm512_set1_ps(step.weight_decay),
                   _mm512_set1_ps(step.decay),
                   _mm512_set1_ps(step.beta1),
                   _mm512_set1_ps(step.beta2),
                   _mm512_set1_ps(step.one_minus_beta1),
                   _mm512_set1_ps(step.one_minus_beta2),
                   _mm512_set1_ps(step.bias_correction2_sqrt_f),
                   _mm512_set1_ps(step.eps),
                   _mm512_set1_ps(step.neg_step_size)};
  c.adamw = step.kind == OptimizerKind::kAdamW;
  c.l2 = !c.adamw && step.weight_decay != 0.0f;
  return c;
}

// The new m and v of 16 lanes.
struct AdamLanes {
  __m512 m, v;
};

// AdamUpdateReference on the 16 elements at i (lanes outside `mask`
// untouched in memory): the operations and their order are the reference's,
// so results are bit-identical (with -ffp-contract=off). kStreamMirror: a
// full, 32-byte aligned vector whose mirror is written with a non-temporal
// store. Returns the new m and v (lanes outside `mask` are not meaningful).
template <bool kStreamMirror>
ZS_AVX512_LANES_INLINE inline AdamLanes AdamUpdate16(const AdamLaneConsts& c,
                                                     GradView grad,
                                                     const AdamSlice& s,
                                                     size_t i,
                                                     __mmask16 mask) {
  __m512 g = _mm512_mul_ps(LoadGrad16(grad, i, mask), c.coef);
  __m512 p = _mm512_maskz_loadu_ps(mask, s.master + i);
  if (c.l2) g = _mm512_fmadd_ps(p, c.wd, g);
  if (c.adamw) p = _mm512_mul_ps(p, c.decay);
  const __m512 m = _mm512_fmadd_ps(
      g, c.omb1,
      _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s.exp_avg + i), c.beta1));
  const __m512 v = _mm512_fmadd_ps(
      _mm512_mul_ps(c.omb2, g), g,
      _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, s.exp_avg_sq + i), c.beta2));
  const __m512 denom =
      _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.bc2), c.eps);
  p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(c.nstep, m), denom));
  _mm512_mask_storeu_ps(s.master + i, mask, p);
  _mm512_mask_storeu_ps(s.exp_avg + i, mask, m);
  _mm512_mask_storeu_ps(s.exp_avg_sq + i, mask, v);
  if (s.mirror != nullptr) {
    if (kStreamMirror) {
      // Full, 32-byte aligned vector: a non-temporal store skips reading
      // the mirror's lines before writing them (write-allocate).
      _mm256_stream_si256(reinterpret_cast<__m256i*>(s.mirror + i),
                          _mm512_cvtepi32_epi16(RoundToBf16x16(p)));
    } else {
      _mm512_mask_cvtepi32_storeu_epi16(s.mirror + i, mask, RoundToBf16x16(p));
    }
  }
  return {m, v};
}

}  // namespace zeroshard

#endif  // defined(__x86_64__)
#endif  // ZEROSHARD_OPTIM_AVX512_LANES_H_
