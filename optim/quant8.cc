// Block-wise dynamic 8-bit quantization: the maps and the scalar reference
// (optim/quant8.h).
#include "optim/quant8.h"

#include <algorithm>
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
  uint8_t zero = 0;
};

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

// One block's codes, scalar: the count of thresholds below y = x / m by a
// branch-free eight-step search of the rounded-down table.
void QuantizeScalar(const float* x, size_t n, float m, const Code& c,
                    uint8_t* codes) {
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

// The same count, 16 lanes at a time, from registers: the group of 16
// thresholds y falls in (y against the last of each of the first 15
// groups), then y against the group's first 15, each fetched per lane by
// a permute of a 16-entry table (table j holds threshold 16h + j at h).
ZS_Q8_AVX512 void QuantizeAvx512(const float* x, size_t n, float m,
                                 const Code& c, uint8_t* codes) {
  const float* t = c.below.data();
  __m512 last[15], within[15];
  for (int k = 0; k < 15; ++k) last[k] = _mm512_set1_ps(t[16 * k + 15]);
  for (int j = 0; j < 15; ++j) {
    alignas(64) float column[16];
    for (int h = 0; h < 16; ++h) column[h] = t[16 * h + j];
    within[j] = _mm512_load_ps(column);
  }
  const __m512 mv = _mm512_set1_ps(m);
  const __m512i one = _mm512_set1_epi32(1);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 y = _mm512_div_ps(_mm512_maskz_loadu_ps(lanes, x + i), mv);
    __m512i hi = _mm512_setzero_si512();
    for (int k = 0; k < 15; ++k) {
      hi = _mm512_mask_add_epi32(hi, _mm512_cmp_ps_mask(y, last[k], _CMP_GT_OQ),
                                 hi, one);
    }
    __m512i count = _mm512_slli_epi32(hi, 4);
    for (int j = 0; j < 15; ++j) {
      const __m512 tj = _mm512_permutexvar_ps(hi, within[j]);
      count = _mm512_mask_add_epi32(count, _mm512_cmp_ps_mask(y, tj, _CMP_GT_OQ),
                                    count, one);
    }
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

ZS_Q8_AVX512 void DequantizeAvx512(const uint8_t* codes, size_t n, float a,
                                   const float* values, float* out) {
  const __m512 av = _mm512_set1_ps(a);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 lanes =
        n - i >= 16 ? static_cast<__mmask16>(0xffff)
                    : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i idx =
        _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, codes + i));
    const __m512 v = _mm512_i32gather_ps(idx, values, 4);
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
    if (UseAvx512()) {
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
