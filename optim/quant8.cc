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
#include "optim/quant8_code.h"

namespace zeroshard {
namespace quant8_internal {
namespace {

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
          key = CompareKey(FloatBitsOf(below[j]));
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

constexpr int kExponentBits = 7;

// The decade search's tables (quant8_code.h) from the construction: decade
// d holds n_d values equally spaced in [0.1, 1] · 10^(d - 6), so its inner
// thresholds lie at whole numbers of |y| · n_d / (0.9 · 10^(d - 6)) - n_d / 9
// counted from the decade's first value. `ok` stays false unless every
// threshold lies within a tenth of the band of where the search puts it and
// no binade meets two boundaries.
DecadeSearch MakeSearch(const Quant8Code& c) {
  DecadeSearch s;
  const int base = c.zero;  // the positive side: values[base..255]
  const int total = 255 - base;
  // boundary[k]: the threshold below region k + 1 (regions: quant8_code.h).
  double boundary[8];
  boundary[0] = c.thresholds[base];
  int first = 1;  // decade d's first value, counted from the zero's
  for (int d = 0; d < kExponentBits; ++d) {
    const int n = c.is_signed ? (1 << d) : (1 << (d + 1));
    const double scale = std::pow(10.0, d - (kExponentBits - 1));
    const double slope = n / (0.9 * scale), offset = n / 9.0 - first;
    s.slope[d + 1] = static_cast<float>(slope);
    s.offset[d + 1] = static_cast<float>(offset);
    s.low[d + 1] = first;
    s.high[d + 1] = first + n - 1;
    for (int j = 1; j < n; ++j) {
      const double t = c.thresholds[base + first + j - 1];
      const double u = t * s.slope[d + 1] - s.offset[d + 1];
      if (std::fabs(u - (first + j)) > kNearBand / 10) return s;
    }
    first += n;
    boundary[d + 1] = c.thresholds[base + first - 1];
  }
  if (first != total) return s;
  // Below the first boundary: the zero's code; above the last: 1.0's.
  s.offset[0] = -0.5f;
  s.offset[8] = -(total + 0.5f);
  s.low[8] = s.high[8] = total;
  const double band = kNearBand;
  for (int i = 0; i < 32; ++i) {
    s.near_lo[i] = s.near_hi[i] = std::numeric_limits<float>::infinity();
    if (i >= kBinades) continue;
    const double lo = i == 0 ? 0.0 : std::ldexp(1.0, i + kFirstBinade - 127);
    const double hi = std::ldexp(1.0, i + kFirstBinade - 126);
    int below = 0, meets = 0;
    for (int k = 0; k < 8; ++k) {
      if (boundary[k] * (1 + 2 * band) < lo) {
        ++below;
      } else if (boundary[k] * (1 - 2 * band) < hi) {
        // Its band meets this binade: the region is `below` or one more.
        ++meets;
        s.near_lo[i] = static_cast<float>(boundary[k] * (1 - band));
        s.near_hi[i] = static_cast<float>(boundary[k] * (1 + band));
      }
    }
    if (meets > 1) return s;
    s.region[i] = below;
  }
  s.ok = true;
  return s;
}

Quant8Code MakeCode(bool is_signed) {
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
  Quant8Code c;
  c.is_signed = is_signed;
  for (int j = 0; j < 256; ++j) {
    c.values[j] = static_cast<float>(data[j]);
    if (c.values[j] == 0.0f) c.zero = static_cast<uint8_t>(j);
    const uint32_t bits = FloatBitsOf(c.values[j]);
    for (int p = 0; p < 4; ++p) {
      c.planes[p][j] = static_cast<uint8_t>(bits >> (8 * p));
    }
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
  c.search = MakeSearch(c);
  return c;
}

}  // namespace

const Quant8Code& CodeFor(Quant8Map map) {
  static const Quant8Code* const kSigned = new Quant8Code(MakeCode(true));
  static const Quant8Code* const kUnsigned = new Quant8Code(MakeCode(false));
  return map == Quant8Map::kSigned ? *kSigned : *kUnsigned;
}

}  // namespace quant8_internal

using quant8_internal::CodeFor;
using quant8_internal::Quant8Code;

namespace {

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
  const Quant8Code& c = CodeFor(map);
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
// y's bucket (Quant8Code::buckets), or, were there no table, by a
// branch-free eight-step search of the rounded-down thresholds.
void QuantizeScalar(const float* x, size_t n, float m, const Quant8Code& c,
                    uint8_t* codes) {
  if (!c.buckets.empty()) {
    for (size_t i = 0; i < n; ++i) codes[i] = quant8_internal::BucketCode(c, x[i], m);
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

// The AVX-512 kernels (quant8_avx512.cc) are compiled for F, BW, VL and DQ.
bool UseAvx512() {
  static const bool avx512 = CpuHasAvx512Dq();
  return avx512;
}

// The decade search also needs its tables.
bool UseDecadeSearch(const Quant8Code& c) {
  return UseAvx512() && !c.buckets.empty() && c.search.ok;
}

}  // namespace

float BlockAbsMax(const float* x, size_t n) {
#if defined(__x86_64__)
  if (UseAvx512()) return quant8_internal::AbsMaxAvx512(x, n);
#endif
  float m = 0.0f;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, std::fabs(x[i]));
    finite &= std::isfinite(x[i]);
  }
  return finite ? m : std::numeric_limits<float>::quiet_NaN();
}

void QuantizeBlock(const float* x, size_t n, float m, Quant8Map map,
                   uint8_t* codes) {
  const Quant8Code& c = CodeFor(map);
  if (m == 0.0f) {
    std::fill(codes, codes + n, c.zero);
    return;
  }
#if defined(__x86_64__)
  if (UseDecadeSearch(c)) {
    quant8_internal::QuantizeBlockAvx512(x, n, m, c, codes);
    return;
  }
#endif
  QuantizeScalar(x, n, m, c, codes);
}

void QuantizeBlockwise(const float* x, size_t n, size_t block, Quant8Map map,
                       uint8_t* codes, float* absmax) {
  for (size_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const size_t len = std::min(n - begin, block);
    absmax[b] = BlockAbsMax(x + begin, len);
    QuantizeBlock(x + begin, len, absmax[b], map, codes + begin);
  }
}

void QuantizeBlockwiseScalar(const float* x, size_t n, size_t block,
                             Quant8Map map, uint8_t* codes, float* absmax) {
  const Quant8Code& c = CodeFor(map);
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
  const Quant8Code& c = CodeFor(map);
  const float* v = c.values.data();
  for (size_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const size_t end = std::min(n, begin + block);
    const float a = absmax[b];
#if defined(__x86_64__)
    if (UseAvx512()) {
      quant8_internal::DequantizeBlockAvx512(codes + begin, end - begin, a, c,
                                             out + begin);
      continue;
    }
#endif
    for (size_t i = begin; i < end; ++i) out[i] = v[codes[i]] * a;
  }
}

}  // namespace zeroshard
