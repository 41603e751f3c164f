// The AVX-512 kernels of block-wise 8-bit quantization (optim/quant8_code.h):
// the decade search for codes, and values from registers for the way back.
// Compiled for the baseline CPU with target attributes; quant8.cc calls
// them only where the CPU has the extensions.
#include <cstddef>
#include <cstdint>
#include <limits>

#include "optim/cpu_features.h"
#include "optim/quant8_code.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12 warns inside its own _mm512_undefined_* (as in optimizer_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define ZS_Q8_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define ZS_Q8_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

namespace zeroshard {
namespace quant8_internal {
namespace {

ZS_Q8_AVX512 inline __mmask16 LanesOf(size_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << left) - 1);
}

bool UseVbmi() {
  static const bool vbmi = CpuHasAvx512Vbmi();
  return vbmi;
}

// The 256 values from registers, 16 codes at a time: eight two-table
// permutes on the code's low 5 bits, then a blend on each of its top 3.
ZS_Q8_AVX512 void DequantizePermute(const uint8_t* codes, size_t n, float a,
                                    const float* values, float* out) {
  __m512 table[16];
  for (int k = 0; k < 16; ++k) table[k] = _mm512_loadu_ps(values + 16 * k);
  const __m512 av = _mm512_set1_ps(a);
  const __m512i bit5 = _mm512_set1_epi32(32), bit6 = _mm512_set1_epi32(64),
                bit7 = _mm512_set1_epi32(128);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = LanesOf(n - i);
    const __m512i idx =
        _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, codes + i));
    __m512 quarter[4];
    const __mmask16 b5 = _mm512_test_epi32_mask(idx, bit5);
    for (int q = 0; q < 4; ++q) {
      const __m512 even =
          _mm512_permutex2var_ps(table[4 * q], idx, table[4 * q + 1]);
      const __m512 odd =
          _mm512_permutex2var_ps(table[4 * q + 2], idx, table[4 * q + 3]);
      quarter[q] = _mm512_mask_blend_ps(b5, even, odd);
    }
    const __mmask16 b6 = _mm512_test_epi32_mask(idx, bit6);
    const __m512 low = _mm512_mask_blend_ps(b6, quarter[0], quarter[1]);
    const __m512 high = _mm512_mask_blend_ps(b6, quarter[2], quarter[3]);
    const __m512 v =
        _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, bit7), low, high);
    _mm512_mask_storeu_ps(out + i, lanes, _mm512_mul_ps(v, av));
  }
}

struct alignas(64) ByteOrder {
  uint8_t bytes[64];
  const uint8_t* data() const { return bytes; }
};

constexpr ByteOrder MakeByteOrder() {
  ByteOrder o{};
  for (int r = 0; r < 4; ++r) {
    for (int lane = 0; lane < 4; ++lane) {
      for (int j = 0; j < 4; ++j) {
        o.bytes[16 * lane + 4 * r + j] = static_cast<uint8_t>(16 * r + 4 * lane + j);
      }
    }
  }
  return o;
}

constexpr ByteOrder kByteOrder = MakeByteOrder();

// 64 codes at a time: each of a value's four bytes from its byte plane (two
// 128-byte permutes and a blend on the code's top bit), then the planes
// interleaved into floats. The unpacks interleave within 128-bit lanes, so
// the codes are first permuted into the order that leaves the floats in
// place: float 16r + 4L + j comes from byte 16L + 4r + j.
ZS_Q8_VBMI size_t DequantizeBytePlanes(const uint8_t* codes, size_t n,
                                       float a, const Quant8Code& c,
                                       float* out) {
  const __m512i perm = _mm512_load_si512(kByteOrder.data());
  __m512i plane_lo[4], plane_hi[4][2], plane_first[4];
  for (int p = 0; p < 4; ++p) {
    plane_first[p] = _mm512_load_si512(c.planes[p]);
    plane_lo[p] = _mm512_load_si512(c.planes[p] + 64);
    plane_hi[p][0] = _mm512_load_si512(c.planes[p] + 128);
    plane_hi[p][1] = _mm512_load_si512(c.planes[p] + 192);
  }
  const __m512 av = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i idx =
        _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(codes + i));
    const __mmask64 top = _mm512_movepi8_mask(idx);
    __m512i bytes[4];
    for (int p = 0; p < 4; ++p) {
      const __m512i lo =
          _mm512_permutex2var_epi8(plane_first[p], idx, plane_lo[p]);
      const __m512i hi =
          _mm512_permutex2var_epi8(plane_hi[p][0], idx, plane_hi[p][1]);
      bytes[p] = _mm512_mask_blend_epi8(top, lo, hi);
    }
    const __m512i w01_lo = _mm512_unpacklo_epi8(bytes[0], bytes[1]);
    const __m512i w01_hi = _mm512_unpackhi_epi8(bytes[0], bytes[1]);
    const __m512i w23_lo = _mm512_unpacklo_epi8(bytes[2], bytes[3]);
    const __m512i w23_hi = _mm512_unpackhi_epi8(bytes[2], bytes[3]);
    const __m512i f[4] = {_mm512_unpacklo_epi16(w01_lo, w23_lo),
                          _mm512_unpackhi_epi16(w01_lo, w23_lo),
                          _mm512_unpacklo_epi16(w01_hi, w23_hi),
                          _mm512_unpackhi_epi16(w01_hi, w23_hi)};
    for (int r = 0; r < 4; ++r) {
      _mm512_storeu_ps(out + i + 16 * r,
                       _mm512_mul_ps(_mm512_castsi512_ps(f[r]), av));
    }
  }
  return i;
}

}  // namespace

// max |x| over n elements (exact in any order), or NaN when one is not
// finite (its magnitude's bits at least those of +inf).
ZS_Q8_AVX512 float AbsMaxAvx512(const float* x, size_t n) {
  __m512 m = _mm512_setzero_ps();
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = 0;
  for (size_t i = 0; i < n; i += 16) {
    const __m512 a =
        _mm512_abs_ps(_mm512_maskz_loadu_ps(LanesOf(n - i), x + i));
    bad |= _mm512_cmpge_epu32_mask(_mm512_castps_si512(a), inf);
    m = _mm512_max_ps(m, a);
  }
  return bad != 0 ? std::numeric_limits<float>::quiet_NaN()
                  : _mm512_reduce_max_ps(m);
}

// The decade search, 16 lanes at a time (quant8_code.h): |y| is taken as
// |x| times 1/m, which errs by an ulp; the band around every threshold
// covers that, and flagged lanes are redone from the bucket table with the
// correctly rounded quotient.
namespace {

struct SearchRegisters {
  __m512i region_a, region_b;
  __m512 near_lo_a, near_lo_b, near_hi_a, near_hi_b, slope, offset;
  __m512i low, high;
};

// The codes of 16 lanes of x (`lanes` of them real), stored; returns the
// lanes flagged for the bucket table.
template <bool kSigned>
ZS_Q8_AVX512 inline __mmask16 SearchLanes(const SearchRegisters& t,
                                          const float* x, __mmask16 lanes,
                                          __m512 rcp, uint8_t* codes) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512 xv = _mm512_maskz_loadu_ps(lanes, x);
  const __m512 a = _mm512_mul_ps(_mm512_abs_ps(xv), rcp);
  const __m512i binade = _mm512_max_epi32(
      _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23),
                       _mm512_set1_epi32(kFirstBinade)),
      zero);
  __m512i region = _mm512_permutex2var_epi32(t.region_a, binade, t.region_b);
  const __m512 near_lo = _mm512_permutex2var_ps(t.near_lo_a, binade, t.near_lo_b);
  const __m512 near_hi = _mm512_permutex2var_ps(t.near_hi_a, binade, t.near_hi_b);
  region = _mm512_mask_add_epi32(region,
                                 _mm512_cmp_ps_mask(a, near_hi, _CMP_GT_OQ),
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
      _mm512_max_epi32(
          _mm512_cvt_roundps_epi32(u,
                                   _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
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

template <bool kSigned>
ZS_Q8_AVX512 void SearchBlock(const float* x, size_t n, float m,
                              const Quant8Code& c, uint8_t* codes) {
  const DecadeSearch& s = c.search;
  const SearchRegisters t{
      .region_a = _mm512_load_si512(s.region),
      .region_b = _mm512_load_si512(s.region + 16),
      .near_lo_a = _mm512_load_ps(s.near_lo),
      .near_lo_b = _mm512_load_ps(s.near_lo + 16),
      .near_hi_a = _mm512_load_ps(s.near_hi),
      .near_hi_b = _mm512_load_ps(s.near_hi + 16),
      .slope = _mm512_load_ps(s.slope),
      .offset = _mm512_load_ps(s.offset),
      .low = _mm512_load_si512(s.low),
      .high = _mm512_load_si512(s.high)};
  const __m512 rcp = _mm512_set1_ps(1.0f / m);
  // The flagged lanes of each 16, redone after each 2048 elements, so that
  // the loop has no branch on the data.
  constexpr size_t kChunk = 2048;
  uint16_t flags[kChunk / 16];
  for (size_t chunk = 0; chunk < n; chunk += kChunk) {
    const size_t len = n - chunk < kChunk ? n - chunk : kChunk;
    const float* xc = x + chunk;
    uint8_t* cc = codes + chunk;
    unsigned any = 0;
    size_t v = 0;
    for (; 16 * v + 16 <= len; ++v) {
      flags[v] = SearchLanes<kSigned>(t, xc + 16 * v, 0xffff, rcp, cc + 16 * v);
      any |= flags[v];
    }
    if (16 * v < len) {
      flags[v] = SearchLanes<kSigned>(
          t, xc + 16 * v, static_cast<__mmask16>((1u << (len - 16 * v)) - 1),
          rcp, cc + 16 * v);
      any |= flags[v++];
    }
    if (any == 0) continue;
    for (size_t k = 0; k < v; ++k) {
      for (unsigned f = flags[k]; f != 0; f &= f - 1) {
        const size_t at = 16 * k + static_cast<size_t>(__builtin_ctz(f));
        cc[at] = BucketCode(c, xc[at], m);
      }
    }
  }
}

}  // namespace

ZS_Q8_AVX512 void QuantizeBlockAvx512(const float* x, size_t n, float m,
                                      const Quant8Code& c, uint8_t* codes) {
  if (c.is_signed) {
    SearchBlock<true>(x, n, m, c, codes);
  } else {
    SearchBlock<false>(x, n, m, c, codes);
  }
}

ZS_Q8_AVX512 void DequantizeBlockAvx512(const uint8_t* codes, size_t n,
                                        float a, const Quant8Code& c,
                                        float* out) {
  const size_t done = UseVbmi() ? DequantizeBytePlanes(codes, n, a, c, out)
                                   : 0;
  if (done < n) {
    DequantizePermute(codes + done, n - done, a, c.values.data(), out + done);
  }
}

}  // namespace quant8_internal
}  // namespace zeroshard

#endif  // __x86_64__
