// Block-wise dynamic 8-bit quantization: the maps and the scalar reference
// (optim/quant8.h).
#include "optim/quant8.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "optim/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zeroshard {
namespace {

struct Code {
  std::array<float, 256> values;
  // thresholds[j] = (values[j] + values[j + 1]) / 2, exact in double.
  std::array<double, 255> thresholds;
  // The thresholds rounded down to FP32, then +inf: the search's table.
  std::array<float, 256> below;
  // The kernels' table, one entry per bucket of y's bits (BucketOf): the
  // count of thresholds below the bucket in the high 16 bits, and in the
  // low 16 how to compare with the one threshold inside it (MakeBuckets).
  std::vector<uint32_t> buckets;
  uint8_t zero = 0;
};

// The buckets: y's sign, exponent and top 7 mantissa bits (its high 16
// bits), for |y| in [2^-23, 1], and per sign one bucket below 2^-23. No
// threshold lies below 2^-22 (the smallest, unsigned, is 1.6e-7) and no
// bucket holds two of them (with 6 mantissa bits one of the unsigned map's
// would); MakeBuckets checks both. So a code is the bucket's count plus one
// comparison of y's low 16 bits with the threshold's, which share the high
// 16.
constexpr uint32_t kLowestHigh = (127 - 23) << 7;  // high 16 bits of 2^-23
constexpr uint32_t kBucketsPerSign = ((127 << 7) - kLowestHigh) + 2;  // to 1.0

inline uint32_t BucketOf(uint32_t bits) {
  const uint32_t high = (bits & 0x7fffffffu) >> 16;
  uint32_t b = high < kLowestHigh ? 0 : high - kLowestHigh + 1;
  b = b < kBucketsPerSign ? b : kBucketsPerSign - 1;  // |y| <= 1: not taken
  return (bits >> 31) * kBucketsPerSign + b;
}

// y's low 16 bits as the entry compares them: a negative y is above a
// threshold of its bucket when its magnitude is below, so its low bits are
// complemented (as the threshold's are).
inline uint32_t CompareKey(uint32_t bits) {
  return (bits & 0xffffu) ^ ((bits >> 31) * 0xffffu);
}

inline uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The code of y from its bucket's entry: the count below, plus one when y
// is above the bucket's threshold (a key of 0xffff: none is above).
inline uint32_t CodeFromEntry(uint32_t entry, uint32_t bits) {
  return (entry >> 16) + (CompareKey(bits) > (entry & 0xffffu) ? 1u : 0u);
}

// Empty when a bucket would hold two thresholds.
std::vector<uint32_t> MakeBuckets(const std::array<float, 256>& below) {
  std::vector<uint32_t> table(2 * kBucketsPerSign);
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t b = 0; b < kBucketsPerSign; ++b) {
      // The floats of the bucket, by magnitude: [lo, hi] as bits.
      const uint32_t lo = b == 0 ? 0 : (kLowestHigh + b - 1) << 16;
      const uint32_t hi = b == 0 ? (kLowestHigh << 16) - 1 : lo | 0xffffu;
      float ends[2];
      const uint32_t lo_bits = lo | (sign << 31), hi_bits = hi | (sign << 31);
      std::memcpy(&ends[0], &lo_bits, 4);
      std::memcpy(&ends[1], &hi_bits, 4);
      const float least = sign ? ends[1] : ends[0];
      const float most = sign ? ends[0] : ends[1];
      // Thresholds below the bucket are counted; one in [least, most) is
      // compared (one equal to `most` is above every y of the bucket).
      uint32_t count = 0, inside = 0, key = 0xffffu;
      for (int j = 0; j < 255; ++j) {
        if (below[j] < least) {
          ++count;
        } else if (below[j] < most) {
          ++inside;
          key = CompareKey(FloatBits(below[j]));
        }
      }
      // The lowest bucket spans many high bits: its key would be wrong.
      // (Not for the maps built here; the kernels would then search.)
      if (inside > 1 || (b == 0 && inside != 0)) return {};
      table[sign * kBucketsPerSign + b] = (count << 16) | key;
    }
  }
  return table;
}

Code MakeCode(bool is_signed) {
  constexpr int kExponentBits = 7;
  std::vector<double> data;
  for (int i = 0; i < kExponentBits; ++i) {
    const int k = (is_signed ? (1 << i) : (1 << (i + 1))) + 1;
    const double scale = std::pow(10.0, i - (kExponentBits - 1));
    for (int j = 0; j + 1 < k; ++j) {
      const double lo = 0.1 + 0.9 * j / (k - 1);
      const double hi = 0.1 + 0.9 * (j + 1) / (k - 1);
      const double v = scale * ((lo + hi) / 2);
      data.push_back(v);
      if (is_signed) data.push_back(-v);
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  Code c;
  for (int j = 0; j < 256; ++j) {
    c.values[j] = static_cast<float>(data[j]);
    if (c.values[j] == 0.0f) c.zero = static_cast<uint8_t>(j);
  }
  for (int j = 0; j < 255; ++j) {
    c.thresholds[j] =
        (static_cast<double>(c.values[j]) + c.values[j + 1]) / 2;
    float f = static_cast<float>(c.thresholds[j]);
    if (static_cast<double>(f) > c.thresholds[j]) {
      f = std::nextafter(f, -std::numeric_limits<float>::infinity());
    }
    c.below[j] = f;
  }
  c.below[255] = std::numeric_limits<float>::infinity();
  c.buckets = MakeBuckets(c.below);
  return c;
}

const Code& CodeFor(Quant8Map map) {
  static const Code* const kSigned = new Code(MakeCode(true));
  static const Code* const kUnsigned = new Code(MakeCode(false));
  return map == Quant8Map::kSigned ? *kSigned : *kUnsigned;
}

absl::Status CheckSizes(size_t n, size_t block, size_t codes, size_t scales) {
  if (block == 0) {
    return absl::InvalidArgumentError("8-bit quantization: block size 0");
  }
  if (codes != n || scales != Quant8Blocks(n, block)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "8-bit quantization: ", n, " elements in blocks of ", block,
        " need ", n, " codes and ", Quant8Blocks(n, block),
        " scales; got ", codes, " and ", scales));
  }
  return absl::OkStatus();
}

}  // namespace

const std::array<float, 256>& DynamicMap(Quant8Map map) {
  return CodeFor(map).values;
}

uint8_t ZeroCode(Quant8Map map) { return CodeFor(map).zero; }

size_t Quant8Blocks(size_t n, size_t block) {
  return block == 0 ? 0 : n / block + (n % block != 0 ? 1 : 0);
}

absl::Status QuantizeBlockwiseReference(absl::Span<const float> x,
                                        size_t block, Quant8Map map,
                                        absl::Span<uint8_t> codes,
                                        absl::Span<float> absmax) {
  if (absl::Status s = CheckSizes(x.size(), block, codes.size(),
                                  absmax.size());
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "8-bit quantization: element ", i, " is not finite (", x[i], ")"));
    }
  }
  const Code& c = CodeFor(map);
  for (size_t b = 0; b * block < x.size(); ++b) {
    const size_t begin = b * block;
    const size_t end = std::min(x.size(), begin + block);
    float m = 0.0f;
    for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[b] = m;
    for (size_t i = begin; i < end; ++i) {
      if (m == 0.0f) {
        codes[i] = c.zero;
        continue;
      }
      const double y = x[i] / m;  // the FP32 quotient, widened exactly
      // The count of thresholds below y: ties (y == t_j) go to the lower.
      codes[i] = static_cast<uint8_t>(
          std::lower_bound(c.thresholds.begin(), c.thresholds.end(), y) -
          c.thresholds.begin());
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeBlockwiseReference(absl::Span<const uint8_t> codes,
                                          absl::Span<const float> absmax,
                                          size_t block, Quant8Map map,
                                          absl::Span<float> out) {
  if (absl::Status s =
          CheckSizes(out.size(), block, codes.size(), absmax.size());
      !s.ok()) {
    return s;
  }
  const std::array<float, 256>& v = CodeFor(map).values;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = v[codes[i]] * absmax[i / block];
  }
  return absl::OkStatus();
}

namespace {

// One block's codes, scalar: the count of thresholds below y = x / m from
// y's bucket (Code::buckets), or, were there no table, by a branch-free
// eight-step search of the rounded-down thresholds.
void QuantizeScalar(const float* x, size_t n, float m, const Code& c,
                    uint8_t* codes) {
  if (!c.buckets.empty()) {
    const uint32_t* table = c.buckets.data();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = FloatBits(x[i] / m);
      codes[i] = static_cast<uint8_t>(CodeFromEntry(table[BucketOf(bits)], bits));
    }
    return;
  }
  const float* t = c.below.data();
  for (size_t i = 0; i < n; ++i) {
    const float y = x[i] / m;
    // t[255] = +inf is never reached: the largest index read is 254.
    unsigned pos = 0;
    for (unsigned step = 128; step != 0; step >>= 1) {
      pos += (y > t[pos + step - 1]) ? step : 0;
    }
    codes[i] = static_cast<uint8_t>(pos);
  }
}

#if defined(__x86_64__)
// GCC 12 warns inside its own _mm512_undefined_* (as in optimizer_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define ZS_Q8_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// The same count, 16 lanes at a time: BucketOf and CodeFromEntry in
// vector form, one gather of the table a lane.
ZS_Q8_AVX512 void QuantizeAvx512(const float* x, size_t n, float m,
                                 const Code& c, uint8_t* codes) {
  const int* table = reinterpret_cast<const int*>(c.buckets.data());
  const __m512 mv = _mm512_set1_ps(m);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i low_mask = _mm512_set1_epi32(0xffff);
  const __m512i first = _mm512_set1_epi32(kLowestHigh - 1);
  const __m512i last = _mm512_set1_epi32(kBucketsPerSign - 1);
  const __m512i per_sign = _mm512_set1_epi32(kBucketsPerSign);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i bits = _mm512_castps_si512(
        _mm512_div_ps(_mm512_maskz_loadu_ps(lanes, x + i), mv));
    const __mmask16 negative = _mm512_cmplt_epi32_mask(bits, zero);
    const __m512i high = _mm512_srli_epi32(_mm512_and_si512(bits, abs_mask), 16);
    __m512i b = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_sub_epi32(high, first), zero), last);
    b = _mm512_mask_add_epi32(b, negative, b, per_sign);
    const __m512i entry = _mm512_mask_i32gather_epi32(zero, lanes, b, table, 4);
    const __m512i low = _mm512_and_si512(bits, low_mask);
    const __m512i key = _mm512_mask_xor_epi32(low, negative, low, low_mask);
    const __mmask16 above =
        _mm512_cmpgt_epu32_mask(key, _mm512_and_si512(entry, low_mask));
    const __m512i base = _mm512_srli_epi32(entry, 16);
    const __m512i count = _mm512_mask_add_epi32(base, above, base, one);
    _mm_mask_storeu_epi8(codes + i, lanes, _mm512_cvtepi32_epi8(count));
  }
}

// max |x| over n elements (exact in any order).
ZS_Q8_AVX512 float AbsMaxAvx512(const float* x, size_t n) {
  __m512 m = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << (n - i)) - 1);
    m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes, x + i)));
  }
  return _mm512_reduce_max_ps(m);
}

// The 256 values from registers: eight two-table permutes on the code's
// low 5 bits, then a blend on each of its top 3 (no gather).
ZS_Q8_AVX512 void DequantizeAvx512(const uint8_t* codes, size_t n, float a,
                                   const float* values, float* out) {
  __m512 table[16];
  for (int k = 0; k < 16; ++k) table[k] = _mm512_loadu_ps(values + 16 * k);
  const __m512 av = _mm512_set1_ps(a);
  const __m512i bit5 = _mm512_set1_epi32(32), bit6 = _mm512_set1_epi32(64),
                bit7 = _mm512_set1_epi32(128);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << (n - i)) - 1);
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
#endif

bool UseAvx512() {
  static const bool avx512 = CpuHasAvx512();
  return avx512;
}

}  // namespace

void QuantizeBlockwise(const float* x, size_t n, size_t block, Quant8Map map,
                       uint8_t* codes, float* absmax) {
  const Code& c = CodeFor(map);
  for (size_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const size_t end = std::min(n, begin + block);
    float m = 0.0f;
#if defined(__x86_64__)
    if (UseAvx512()) {
      m = AbsMaxAvx512(x + begin, end - begin);
    } else {
      for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    }
#else
    for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
#endif
    absmax[b] = m;
    if (m == 0.0f) {
      std::fill(codes + begin, codes + end, c.zero);
      continue;
    }
#if defined(__x86_64__)
    if (UseAvx512() && !c.buckets.empty()) {
      QuantizeAvx512(x + begin, end - begin, m, c, codes + begin);
      continue;
    }
#endif
    QuantizeScalar(x + begin, end - begin, m, c, codes + begin);
  }
}

void QuantizeBlockwiseScalar(const float* x, size_t n, size_t block,
                             Quant8Map map, uint8_t* codes, float* absmax) {
  const Code& c = CodeFor(map);
  for (size_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const size_t end = std::min(n, begin + block);
    float m = 0.0f;
    for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[b] = m;
    if (m == 0.0f) {
      std::fill(codes + begin, codes + end, c.zero);
      continue;
    }
    QuantizeScalar(x + begin, end - begin, m, c, codes + begin);
  }
}

void DequantizeBlockwise(const uint8_t* codes, const float* absmax, size_t n,
                         size_t block, Quant8Map map, float* out) {
  const float* v = CodeFor(map).values.data();
  for (size_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const size_t end = std::min(n, begin + block);
    const float a = absmax[b];
#if defined(__x86_64__)
    if (UseAvx512()) {
      DequantizeAvx512(codes + begin, end - begin, a, v, out + begin);
      continue;
    }
#endif
    for (size_t i = begin; i < end; ++i) out[i] = v[codes[i]] * a;
  }
}

}  // namespace zeroshard
