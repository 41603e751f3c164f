// The tables behind optim/quant8.h's kernels, shared by the scalar code
// (quant8.cc) and the AVX-512 kernels (quant8_avx512.cc); not a public
// header of the part.
//
// A code is the count of thresholds below y = x / absmax. Three ways find
// it, all equal to QuantizeBlockwiseReference:
//  - the bucket table (Quant8Code::buckets): y's top 16 bits name a bucket
//    holding at most one threshold, so a lookup and one comparison;
//  - the decade search (Quant8Code::search, the AVX-512 kernel): the map is
//    seven decades of equally spaced values, so within a decade the count is
//    floor(|y| · slope - offset); the decade comes from |y|'s binade and at
//    most one boundary inside it. Where |y| lies within kNearBand of a
//    threshold (the float arithmetic could land on either side), the lane
//    is flagged and its code taken from the bucket table instead;
//  - the byte planes (Quant8Code::planes) turn codes back into values with
//    byte permutes, 64 at a time.
#ifndef ZEROSHARD_OPTIM_QUANT8_CODE_H_
#define ZEROSHARD_OPTIM_QUANT8_CODE_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "optim/quant8.h"

namespace zeroshard {
namespace quant8_internal {

// The buckets: y's sign, exponent and top 7 mantissa bits (its high 16
// bits), for |y| in [2^-23, 1], and per sign one bucket below 2^-23. No
// threshold lies below 2^-22 (the smallest, unsigned, is 1.6e-7) and no
// bucket holds two of them (with 6 mantissa bits one of the unsigned map's
// would); MakeBuckets checks both. So a code is the bucket's count plus one
// comparison of y's low 16 bits with the threshold's, which share the high
// 16.
inline constexpr uint32_t kLowestHigh = (127 - 23) << 7;  // 2^-23's top bits
inline constexpr uint32_t kBucketsPerSign =
    ((127 << 7) - kLowestHigh) + 2;  // up to 1.0

inline uint32_t FloatBitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

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

// The code of y (as bits) from its bucket's entry: the count below, plus
// one when y is above the bucket's threshold (a key of 0xffff: none is).
inline uint32_t CodeFromEntry(uint32_t entry, uint32_t bits) {
  return (entry >> 16) + (CompareKey(bits) > (entry & 0xffffu) ? 1u : 0u);
}

// The decade search's binades: |y|'s biased exponent minus kFirstBinade,
// clamped at 0 (everything below 2^-24, where no threshold lies, shares
// binade 0); 1.0 is binade 24.
inline constexpr int kFirstBinade = 127 - 24;
inline constexpr int kBinades = 25;
// A lane is searched in the bucket table when |y| lies within this
// fraction of a decade's boundary threshold, or its position in the decade
// within this much of a whole number (an inner threshold). The float
// arithmetic of the search errs by under 2^-14 there; tests check every
// float near every threshold and a scan of all of [2^-24, 1].
inline constexpr float kNearBand = 1.0f / 2048;

// The decade search's tables. Regions: 0 below the first threshold (code
// of 0), 1 + d for decade d (d = 0..6), 8 above the last (code of 1.0); a
// binade holds at most one region boundary.
struct DecadeSearch {
  bool ok = false;  // every binade holds at most one boundary
  // Per binade: the region of its lowest float, and the band around the
  // boundary inside it (+inf when none): |y| > near_hi is the next region,
  // |y| in (near_lo, near_hi] is searched in the bucket table.
  alignas(64) int32_t region[32] = {};
  alignas(64) float near_lo[32] = {};
  alignas(64) float near_hi[32] = {};
  // Per region: the count of positive thresholds below |y| is
  // clamp(floor(|y| · slope - offset), low, high).
  alignas(64) float slope[16] = {};
  alignas(64) float offset[16] = {};
  alignas(64) int32_t low[16] = {};
  alignas(64) int32_t high[16] = {};
};

struct Quant8Code {
  std::array<float, 256> values;
  // thresholds[j] = (values[j] + values[j + 1]) / 2, exact in double.
  std::array<double, 255> thresholds;
  // The thresholds rounded down to FP32, then +inf.
  std::array<float, 256> below;
  // One entry per bucket (BucketOf): the count of thresholds below the
  // bucket in the high 16 bits, and in the low 16 how to compare with the
  // one threshold inside it. Empty if a bucket would hold two.
  std::vector<uint32_t> buckets;
  DecadeSearch search;
  // planes[p][c]: byte p (little-endian) of values[c]'s bits.
  alignas(64) uint8_t planes[4][256] = {};
  uint8_t zero = 0;
  bool is_signed = false;
};

const Quant8Code& CodeFor(Quant8Map map);

// The code of y = x / m from the bucket table (m > 0, x finite).
inline uint8_t BucketCode(const Quant8Code& c, float x, float m) {
  const uint32_t bits = FloatBitsOf(x / m);
  return static_cast<uint8_t>(CodeFromEntry(c.buckets[BucketOf(bits)], bits));
}

#if defined(__x86_64__)
// The AVX-512 kernels (quant8_avx512.cc), for one block; the callers check
// the CPU. QuantizeBlockAvx512 needs c.buckets and c.search.ok; the
// dequantization takes the byte planes 64 codes at a time where the CPU
// has AVX-512 VBMI.
// max |x|, or NaN when an element is not finite.
float AbsMaxAvx512(const float* x, size_t n);
void QuantizeBlockAvx512(const float* x, size_t n, float m,
                         const Quant8Code& c, uint8_t* codes);
void DequantizeBlockAvx512(const uint8_t* codes, size_t n, float a,
                           const Quant8Code& c, float* out);
#endif

}  // namespace quant8_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_QUANT8_CODE_H_
