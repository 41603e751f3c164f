// BF16 / FP16 conversions against slow references written here with double
// arithmetic (nearbyint in the default round-to-nearest-even mode).
#include "common/dtype.h"

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace {

// An IEEE binary format with `mant` fraction bits, exponent bias `bias` and
// `exp_bits` exponent bits.
struct Format {
  int mant;
  int bias;
  int exp_bits;
  int emin() const { return 1 - bias; }
  int emax() const { return bias; }
  uint32_t inf() const { return ((1u << exp_bits) - 1) << mant; }
};
constexpr Format kBf16{7, 127, 8};
constexpr Format kFp16{10, 15, 5};

// The value of an encoding (not NaN / Inf), in double.
double Decode(const Format& f, uint32_t bits) {
  const uint32_t sign = bits >> (f.mant + f.exp_bits);
  const uint32_t e = (bits >> f.mant) & ((1u << f.exp_bits) - 1);
  const uint32_t m = bits & ((1u << f.mant) - 1);
  const double mag = e == 0 ? std::ldexp(m, f.emin() - f.mant)
                            : std::ldexp((1u << f.mant) + m,
                                         static_cast<int>(e) - f.bias - f.mant);
  return sign ? -mag : mag;
}

// Rounds a finite float to the format, to nearest, ties to even; returns the
// encoding. The slow way: scale to the quantum of the value's binade, round
// to an integer, rebuild.
uint32_t SlowRound(const Format& f, float x) {
  const uint32_t sign = std::signbit(x) ? 1u << (f.mant + f.exp_bits) : 0u;
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | f.inf();
  const int e = std::max(std::ilogb(a), f.emin());
  const double q = std::ldexp(1.0, e - f.mant);
  const double r = std::nearbyint(a / q) * q;
  if (r == 0) return sign;
  if (r < std::ldexp(1.0, f.emin())) {
    return sign | static_cast<uint32_t>(r / std::ldexp(1.0, f.emin() - f.mant));
  }
  const int re = std::ilogb(r);
  if (re > f.emax()) return sign | f.inf();
  const uint32_t m = static_cast<uint32_t>((r / std::ldexp(1.0, re) - 1.0) *
                                           (1u << f.mant));
  return sign | (static_cast<uint32_t>(re + f.bias) << f.mant) | m;
}

uint16_t SlowToBf16(float x) { return static_cast<uint16_t>(SlowRound(kBf16, x)); }
uint16_t SlowToFp16(float x) { return static_cast<uint16_t>(SlowRound(kFp16, x)); }

bool IsNanBits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

TEST(Bf16Test, KnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F808000u)), 0x3F80);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F818000u)), 0x3F82);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3F808001u)), 0x3F81);
  // Overflow: the largest float rounds to Inf; infinities stay.
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7F7FFFFFu)), 0x7F80);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xFF80);
  // Subnormals round like everything else (no flush to zero).
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00018000u)), 0x0002);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00008000u)), 0x0000);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00008001u)), 0x0001);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x807FFFFFu)), 0x8080);
}

TEST(Bf16Test, NanStaysQuietNanWithSign) {
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFF800001u,
                     0xFFFFFFFFu, 0x7F80FFFFu, 0x7F810000u}) {
    const uint16_t b = FloatToBf16(BitsToFloat(u));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(b))) << std::hex << u;
    EXPECT_EQ(b & 0x0040, 0x0040) << std::hex << u;         // quiet
    EXPECT_EQ(b & 0x8000, (u >> 16) & 0x8000) << std::hex << u;  // sign
  }
}

TEST(Bf16Test, MatchesSlowReferenceOnEveryRoundingCase) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  // Every high half with the low halves that decide rounding.
  const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000};
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : lows) {
      const uint32_t u = (hi << 16) | lo;
      if (IsNanBits(u)) continue;
      const float f = BitsToFloat(u);
      ASSERT_EQ(FloatToBf16(f), SlowToBf16(f)) << std::hex << u;
    }
  }
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = rng();
    if (IsNanBits(u)) continue;
    const float f = BitsToFloat(u);
    ASSERT_EQ(FloatToBf16(f), SlowToBf16(f)) << std::hex << u;
  }
}

TEST(Bf16Test, AllBf16ValuesWidenExactlyAndRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    EXPECT_EQ(FloatBits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), h) << std::hex << h;
      if (!std::isinf(f)) {
        ASSERT_EQ(static_cast<double>(f), Decode(kBf16, h));
      }
    }
  }
}

TEST(Fp16Test, KnownValues) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFp16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65519.996f), 0x7BFF);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7C00);  // halfway to 2^16: to even = Inf
  EXPECT_EQ(FloatToFp16(1e10f), 0x7C00);
  EXPECT_EQ(FloatToFp16(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToFp16(INFINITY), 0x7C00);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(FloatToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 -> 2
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);       // tie, even
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);   // tie, up
}

TEST(Fp16Test, NanStaysQuietNanWithSign) {
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t h = FloatToFp16(BitsToFloat(u));
    EXPECT_TRUE(std::isnan(Fp16ToFloat(h))) << std::hex << u;
    EXPECT_EQ(h & 0x0200, 0x0200) << std::hex << u;
    EXPECT_EQ(h & 0x8000, (u >> 16) & 0x8000) << std::hex << u;
  }
}

// Every FP16 value and every rounding boundary next to it: the value, the
// midpoints to both neighbours and the floats just either side of them.
TEST(Fp16Test, MatchesSlowReferenceAtEveryBoundary) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  int checked = 0;
  for (uint32_t h = 0; h <= 0x7BFF; ++h) {
    const double lo = Decode(kFp16, h);
    const double hi = h == 0x7BFF ? 65536.0 : Decode(kFp16, h + 1);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float x : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, INFINITY),
                    std::nextafter(static_cast<float>(lo), INFINITY)}) {
      for (float s : {x, -x}) {
        ASSERT_EQ(FloatToFp16(s), SlowToFp16(s)) << s << " h=" << std::hex << h;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300000);
}

// A strided sweep over all float bit patterns (every 251st, ~17M values).
TEST(Fp16Test, MatchesSlowReferenceOnStridedSweepOfAllFloats) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251) {
    const uint32_t bits = static_cast<uint32_t>(u);
    if (IsNanBits(bits)) continue;
    const float f = BitsToFloat(bits);
    ASSERT_EQ(FloatToFp16(f), SlowToFp16(f)) << std::hex << bits;
  }
}

TEST(Fp16Test, AllFp16ValuesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F && m != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
      ASSERT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f))));
      continue;
    }
    if (e == 0x1F) {
      ASSERT_TRUE(std::isinf(f));
    } else {
      ASSERT_EQ(static_cast<double>(f), Decode(kFp16, h)) << std::hex << h;
    }
    ASSERT_EQ(FloatToFp16(f), h) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
  }
}

TEST(DTypeTest, ArrayConversionsMatchScalar) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const size_t n = 1037;
  std::vector<float> f(n), back(n);
  std::vector<uint16_t> h(n);
  for (float& x : f) x = BitsToFloat(rng());
  FloatToBf16Array(f.data(), h.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], FloatToBf16(f[i]));
  Bf16ToFloatArray(h.data(), back.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(FloatBits(back[i]), FloatBits(Bf16ToFloat(h[i])));
  FloatToFp16Array(f.data(), h.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], FloatToFp16(f[i]));
  Fp16ToFloatArray(h.data(), back.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(FloatBits(back[i]), FloatBits(Fp16ToFloat(h[i])));
}

TEST(DTypeTest, NamesSizesAndParsing) {
  EXPECT_EQ(DTypeSize(DType::kFp32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBf16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFp16), 2u);
  EXPECT_EQ(DTypeSize(DType::kUnspecified), 0u);
  for (DType d : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*ParseDType("BFloat16"), DType::kBf16);
  EXPECT_EQ(*ParseDType("float32"), DType::kFp32);
  EXPECT_EQ(*ParseDType("float16"), DType::kFp16);
  const auto bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("int8"), absl::string_view::npos);
}

}  // namespace
}  // namespace zeroshard
