// AVX-512 lane helpers shared by the optimizer rules' kernels (AdamW's in
// optimizer_avx512.cc, Lion's in lion.cc): the gradient's load and the BF16
// mirror's rounding. Marked with the target attribute, so a file compiled
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

}  // namespace zeroshard

#endif  // defined(__x86_64__)
#endif  // ZEROSHARD_OPTIM_AVX512_LANES_H_
