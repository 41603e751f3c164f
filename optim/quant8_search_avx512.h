// The decade search of optim/quant8_code.h on 16 lanes, for the AVX-512
// kernels that quantize (quant8_avx512.cc, adam8bit_avx512.cc). Always
// inlined under the target attribute, as optim/avx512_lanes.h's helpers are
// (a __m512 crosses no call); call only where the CPU has AVX-512 F, BW,
// VL and DQ. Not a public header of the part.
#ifndef ZEROSHARD_OPTIM_QUANT8_SEARCH_AVX512_H_
#define ZEROSHARD_OPTIM_QUANT8_SEARCH_AVX512_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "optim/quant8_code.h"

#define ZS_Q8_SEARCH_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), always_inline))

namespace zeroshard {
namespace quant8_internal {

// The decade search, 16 lanes at a time (quant8_code.h): |y| is taken as
// |x| times 1/m, which errs by an ulp; the band around every threshold
// covers that, and flagged lanes are redone from the bucket table with the
// correctly rounded quotient.
struct SearchRegisters {
  __m512i region_a, region_b;
  __m512 near_lo_a, near_lo_b, near_hi_a, near_hi_b, slope, offset;
  __m512i low, high;
};

// The codes of 16 lanes of x (`lanes` of them real), stored; returns the
// lanes flagged for the bucket table.
template <bool kSigned>
ZS_Q8_SEARCH_INLINE inline __mmask16 SearchLanes(const SearchRegisters& t,
                                                 const float* x,
                                                 __mmask16 lanes, __m512 rcp,
                                                 uint8_t* codes) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512 xv = _mm512_maskz_loadu_ps(lanes, x);
  const __m512 a = _mm512_mul_ps(_mm512_abs_ps(xv), rcp);
  const __m512i binade = _mm512_max_epi32(
      _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23),
                       _mm512_set1_epi32(kFirstBinade)),
      zero);
  __m512i region = _mm512_permutex2var_epi32(t.region_a, binade, t.region_b);
  const __m512 near_lo =
      _mm512_permutex2var_ps(t.near_lo_a, binade, t.near_lo_b);
  const __m512 near_hi =
      _mm512_permutex2var_ps(t.near_hi_a, binade, t.near_hi_b);
  region =
      _mm512_mask_add_epi32(region, _mm512_cmp_ps_mask(a, near_hi, _CMP_GT_OQ),
                            region, _mm512_set1_epi32(1));
  __mmask16 flag = _mm512_mask_cmp_ps_mask(
      _mm512_cmp_ps_mask(a, near_lo, _CMP_GT_OQ), a, near_hi, _CMP_LE_OQ);
  const __m512 u = _mm512_fmsub_ps(a, _mm512_permutexvar_ps(region, t.slope),
                                   _mm512_permutexvar_ps(region, t.offset));
  // u's distance from the nearest whole number, and its floor.
  const __m512 off = _mm512_reduce_ps(u, _MM_FROUND_TO_NEAREST_INT);
  flag |= _mm512_cmp_ps_mask(_mm512_abs_ps(off), _mm512_set1_ps(kNearBand),
                             _CMP_LT_OQ);
  const __m512i count = _mm512_min_epi32(
      _mm512_max_epi32(_mm512_cvt_roundps_epi32(
                           u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
                       _mm512_permutexvar_epi32(region, t.low)),
      _mm512_permutexvar_epi32(region, t.high));
  const __mmask16 negative =
      _mm512_cmplt_epi32_mask(_mm512_castps_si512(xv), zero);
  __m512i code;
  if constexpr (kSigned) {
    // Negative y: 127 minus the count below |y|, the value 1.0 aside.
    const __m512i mid = _mm512_set1_epi32(127);
    code = _mm512_mask_sub_epi32(_mm512_add_epi32(mid, count), negative, mid,
                                 _mm512_min_epi32(count, mid));
  } else {
    code = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~negative), count);
  }
  _mm_mask_storeu_epi8(codes, lanes, _mm512_cvtepi32_epi8(code));
  return flag & lanes;
}

// The search's tables of `c` in registers.
ZS_Q8_SEARCH_INLINE inline SearchRegisters SearchRegistersOf(
    const Quant8Code& c) {
  const DecadeSearch& s = c.search;
  return SearchRegisters{.region_a = _mm512_load_si512(s.region),
                         .region_b = _mm512_load_si512(s.region + 16),
                         .near_lo_a = _mm512_load_ps(s.near_lo),
                         .near_lo_b = _mm512_load_ps(s.near_lo + 16),
                         .near_hi_a = _mm512_load_ps(s.near_hi),
                         .near_hi_b = _mm512_load_ps(s.near_hi + 16),
                         .slope = _mm512_load_ps(s.slope),
                         .offset = _mm512_load_ps(s.offset),
                         .low = _mm512_load_si512(s.low),
                         .high = _mm512_load_si512(s.high)};
}

}  // namespace quant8_internal
}  // namespace zeroshard

#endif  // defined(__x86_64__)
#endif  // ZEROSHARD_OPTIM_QUANT8_SEARCH_AVX512_H_
