// Block-wise dynamic 8-bit quantization (optim/quant8.h): the maps and the
// round trip bit for bit against torch's run of the published algorithm
// (tests/fixtures/make_quant8_golden.py), the nearest-code rule by brute
// force on fresh random blocks, ties, and bad input.
#include "optim/quant8.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "optim/quant8_code.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_json.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace quant8_test {
namespace {

uint32_t Bits(float f) { return FloatBits(f); }

std::vector<float> Floats(const nlohmann::json& bits) {
  return testing::GoldenFloats(bits);
}

// The references over vectors or spans (mutable spans do not convert
// implicitly).
template <typename C, typename A>
absl::Status Quantize(absl::Span<const float> x, size_t block, Quant8Map map,
                      C&& codes, A&& absmax) {
  return QuantizeBlockwiseReference(
      x, block, map, absl::Span<uint8_t>(codes.data(), codes.size()),
      absl::Span<float>(absmax.data(), absmax.size()));
}

template <typename O>
absl::Status Dequantize(absl::Span<const uint8_t> codes,
                        absl::Span<const float> absmax, size_t block,
                        Quant8Map map, O&& out) {
  return DequantizeBlockwiseReference(
      codes, absmax, block, map, absl::Span<float>(out.data(), out.size()));
}

Quant8Map MapOf(const nlohmann::json& name) {
  return name == "signed" ? Quant8Map::kSigned : Quant8Map::kUnsigned;
}

nlohmann::json Golden() {
  std::ifstream in("tests/fixtures/quant8_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/quant8_golden.json not found; "
                            "tests run from the repo root";
  if (!in.good()) return nlohmann::json();
  return nlohmann::json::parse(in);
}

TEST(Quant8Test, MapsAreThePublishedConstruction) {
  const nlohmann::json golden = Golden();
  ASSERT_TRUE(golden.is_object());
  for (const Quant8Map map : {Quant8Map::kSigned, Quant8Map::kUnsigned}) {
    const bool is_signed = map == Quant8Map::kSigned;
    const std::array<float, 256>& v = DynamicMap(map);
    const std::vector<float> want =
        Floats(golden.at("maps").at(is_signed ? "signed" : "unsigned"));
    ASSERT_EQ(want.size(), 256u);
    for (int j = 0; j < 256; ++j) {
      EXPECT_EQ(Bits(v[j]), Bits(want[j])) << "code " << j;
      if (j > 0) {
        EXPECT_LT(v[j - 1], v[j]) << "code " << j;
      }
    }
    EXPECT_EQ(v[255], 1.0f);
    EXPECT_EQ(v[ZeroCode(map)], 0.0f);
    EXPECT_EQ(ZeroCode(map), is_signed ? 127 : 0);
    // The smallest magnitude: 10^-6 times the one midpoint of [0.1, 1]
    // (signed) or the first of two (unsigned).
    EXPECT_FLOAT_EQ(v[ZeroCode(map) + 1], is_signed ? 0.55e-6f : 0.325e-6f);
  }
}

TEST(Quant8Test, RoundTripEqualsTorchBitForBit) {
  const nlohmann::json golden = Golden();
  ASSERT_TRUE(golden.is_object());
  int cases = 0;
  for (const auto& c : golden.at("cases")) {
    const Quant8Map map = MapOf(c.at("map"));
    const size_t block = c.at("block");
    const std::vector<float> x = Floats(c.at("x"));
    SCOPED_TRACE(::testing::Message() << c.at("map") << " n " << x.size()
                                      << " block " << block);
    std::vector<uint8_t> codes(x.size());
    std::vector<float> absmax(Quant8Blocks(x.size(), block));
    ASSERT_TRUE(
        Quantize(x, block, map, codes, absmax).ok());
    const std::vector<float> want_absmax = Floats(c.at("absmax"));
    ASSERT_EQ(absmax.size(), want_absmax.size());
    for (size_t b = 0; b < absmax.size(); ++b) {
      EXPECT_EQ(Bits(absmax[b]), Bits(want_absmax[b])) << "block " << b;
    }
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      differ += codes[i] != c.at("codes")[i].get<int>() ? 1 : 0;
    }
    EXPECT_EQ(differ, 0u) << "codes differ from torch's";
    std::vector<float> out(x.size());
    ASSERT_TRUE(
        Dequantize(codes, absmax, block, map, out).ok());
    const std::vector<float> want = Floats(c.at("dequantized"));
    differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      differ += Bits(out[i]) != Bits(want[i]) ? 1 : 0;
    }
    EXPECT_EQ(differ, 0u) << "dequantized values differ from torch's";

    // The control: the neighbouring block size gives other codes, so the
    // comparison above can fail.
    std::vector<uint8_t> other(x.size());
    std::vector<float> other_absmax(Quant8Blocks(x.size(), block - 1));
    ASSERT_TRUE(Quantize(x, block - 1, map, other,
                                           other_absmax)
                    .ok());
    differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      differ += other[i] != c.at("codes")[i].get<int>() ? 1 : 0;
    }
    EXPECT_GT(differ, 0u);
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

// Each code is the nearest value to x / absmax (by brute force over all
// 256, in double), a tie going to the lower; every block's largest
// magnitude comes back exactly when it is positive.
TEST(Quant8Test, CodesAreNearestOnRandomBlocks) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    const Quant8Map map = round % 2 ? Quant8Map::kSigned : Quant8Map::kUnsigned;
    const std::array<float, 256>& v = DynamicMap(map);
    const size_t block = 1 + rng() % 300;
    const size_t n = 1 + rng() % 1500;
    std::lognormal_distribution<float> mag(0.0f, 4.0f);
    std::vector<float> x(n);
    for (float& e : x) {
      e = mag(rng) * (map == Quant8Map::kSigned && rng() % 2 ? -1.0f : 1.0f);
    }
    std::vector<uint8_t> codes(n);
    std::vector<float> absmax(Quant8Blocks(n, block));
    ASSERT_TRUE(Quantize(x, block, map, codes, absmax).ok());
    std::vector<float> out(n);
    ASSERT_TRUE(Dequantize(codes, absmax, block, map, out).ok());
    for (size_t i = 0; i < n; ++i) {
      const float m = absmax[i / block];
      ASSERT_GT(m, 0.0f);
      ASSERT_LE(std::fabs(x[i]), m);
      const double y = static_cast<double>(x[i] / m);
      int best = 0;
      for (int j = 1; j < 256; ++j) {
        if (std::fabs(v[j] - y) < std::fabs(v[best] - y)) best = j;
      }
      ASSERT_EQ(codes[i], best) << "element " << i << " y " << y;
      if (std::fabs(x[i]) == m && x[i] > 0) {
        ASSERT_EQ(out[i], x[i]);
      }
    }
  }
}

TEST(Quant8Test, ATieGoesToTheLowerCode) {
  for (const Quant8Map map : {Quant8Map::kSigned, Quant8Map::kUnsigned}) {
    const std::array<float, 256>& v = DynamicMap(map);
    int ties = 0;
    for (int j = 0; j + 1 < 256; ++j) {
      const double t = (static_cast<double>(v[j]) + v[j + 1]) / 2;
      const float tf = static_cast<float>(t);
      if (static_cast<double>(tf) != t || tf > 1.0f) continue;
      // A block whose maximum is 1 holds the midpoint itself.
      const std::vector<float> x = {1.0f, tf};
      std::vector<uint8_t> codes(2);
      std::vector<float> absmax(1);
      ASSERT_TRUE(Quantize(x, 2, map, codes, absmax).ok());
      EXPECT_EQ(codes[1], j) << "the tie between codes " << j << " and "
                             << j + 1;
      ++ties;
    }
    EXPECT_GT(ties, 10) << "few exact midpoints: the check saw too little";
  }
}

// The servers' kernels equal the references on fresh random blocks: wide
// magnitudes, every code's value and every threshold's neighbours (the
// float search's edge cases), zero blocks, short last blocks.
TEST(Quant8Test, TheFastKernelsEqualTheReferences) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> exponent(-12.0f, 4.0f);
  for (const Quant8Map map : {Quant8Map::kSigned, Quant8Map::kUnsigned}) {
    const std::array<float, 256>& v = DynamicMap(map);
    std::vector<float> x;
    // A block whose maximum is 1 holds each code value and the floats just
    // around each midpoint.
    x.push_back(1.0f);
    for (int j = 0; j < 256; ++j) {
      x.push_back(v[j]);
      if (j + 1 < 256) {
        const float mid = static_cast<float>((static_cast<double>(v[j]) + v[j + 1]) / 2);
        for (float f : {std::nextafter(mid, -2.0f), mid, std::nextafter(mid, 2.0f)}) {
          if (std::fabs(f) <= 1.0f) x.push_back(f);
        }
      }
    }
    x.resize(2048, 0.0f);
    x.insert(x.end(), 2048, 0.0f);  // a zero block
    for (int i = 0; i < 2048 * 3 + 77; ++i) {  // random blocks, a short one last
      const float mag = std::pow(10.0f, exponent(rng));
      const float r = normal(rng) * mag;
      x.push_back(map == Quant8Map::kSigned ? r : std::fabs(r));
    }
    const size_t n = x.size(), blocks = Quant8Blocks(n, kQuant8Block);
    std::vector<uint8_t> want(n), got(n);
    std::vector<float> want_max(blocks), got_max(blocks);
    ASSERT_TRUE(Quantize(x, kQuant8Block, map, want, want_max).ok());
    for (const bool scalar : {false, true}) {
      (scalar ? QuantizeBlockwiseScalar : QuantizeBlockwise)(
          x.data(), n, kQuant8Block, map, got.data(), got_max.data());
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) differ += want[i] != got[i];
      EXPECT_EQ(differ, 0u) << (scalar ? "scalar" : "dispatched")
                            << " codes differ from the reference";
      EXPECT_EQ(want_max, got_max);
    }
    std::vector<float> a(n), b(n);
    ASSERT_TRUE(Dequantize(want, want_max, kQuant8Block, map, a).ok());
    DequantizeBlockwise(want.data(), want_max.data(), n, kQuant8Block, map, b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
  }
}

// The kernels find a code from y's top 16 bits (a table of buckets) and
// one comparison: every bucket's first and last float of either sign, and
// their neighbours, from 2^-24 up to 1, in a block whose maximum is 1 (so
// y = x), get the reference's codes.
TEST(Quant8Test, EveryBucketEdgeEqualsTheReference) {
  std::vector<float> x = {1.0f};
  for (uint32_t high = (127 - 24) << 7; high <= (127 << 7); ++high) {
    for (uint32_t low : {0u, 1u, 0xfffeu, 0xffffu}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        const uint32_t bits = sign | (high << 16) | low;
        float f;
        std::memcpy(&f, &bits, 4);
        if (std::fabs(f) <= 1.0f) x.push_back(f);
      }
    }
  }
  ASSERT_GT(x.size(), 20000u);
  for (const Quant8Map map : {Quant8Map::kSigned, Quant8Map::kUnsigned}) {
    // Blocks of 2048 each with 1 first: y = x exactly.
    std::vector<float> blocked;
    for (size_t i = 1; i < x.size(); ++i) {
      if (blocked.size() % kQuant8Block == 0) blocked.push_back(1.0f);
      blocked.push_back(x[i]);
    }
    const size_t n = blocked.size(), blocks = Quant8Blocks(n, kQuant8Block);
    std::vector<uint8_t> want(n), got(n);
    std::vector<float> want_max(blocks), got_max(blocks);
    ASSERT_TRUE(Quantize(blocked, kQuant8Block, map, want, want_max).ok());
    for (const bool scalar : {false, true}) {
      (scalar ? QuantizeBlockwiseScalar : QuantizeBlockwise)(
          blocked.data(), n, kQuant8Block, map, got.data(), got_max.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(want[i], got[i]) << (scalar ? "scalar" : "dispatched")
                                   << ": y = " << blocked[i];
      }
    }
  }
}

// The AVX-512 kernel counts within a decade by arithmetic and flags the
// lanes near a threshold for the bucket table (quant8_code.h). Both maps
// must build its tables (else the kernel would quietly not run). In blocks
// whose maximum is 1, every float of [0, 1] of either sign gets the bucket
// table's code (itself equal to the reference, above) when
// ZS_QUANT8_EVERY_FLOAT is set (16 s); otherwise every 61st, and every
// float within 8 of each threshold, each edge of the bands around them and
// each boundary's band (a few seconds less).
TEST(Quant8Test, TheDecadeSearchEqualsTheBuckets) {
  const bool every = std::getenv("ZS_QUANT8_EVERY_FLOAT") != nullptr;
  constexpr uint32_t kOne = 0x3f800000u;
  for (const Quant8Map map : {Quant8Map::kSigned, Quant8Map::kUnsigned}) {
    const quant8_internal::Quant8Code& code = quant8_internal::CodeFor(map);
    ASSERT_TRUE(code.search.ok);
    const quant8_internal::DecadeSearch& search = code.search;
    // The magnitudes tried, as bits.
    std::vector<uint32_t> tried;
    for (uint32_t bits = 0; bits <= kOne; bits += every ? 1 : 61) {
      tried.push_back(bits);
    }
    auto around = [&](double y) {
      if (!(y > 0.0 && y <= 1.0)) return;
      const uint32_t center = FloatBits(static_cast<float>(y));
      for (uint32_t b = center - 8; b <= center + 8; ++b) {
        if (b <= kOne) tried.push_back(b);
      }
    };
    if (!every) {
      for (int i = 0; i < 32; ++i) {
        around(search.near_lo[i]);
        around(search.near_hi[i]);
      }
      for (int r = 1; r <= 7; ++r) {
        for (int k = search.low[r] - 1; k <= search.high[r] + 1; ++k) {
          for (const float e : {-quant8_internal::kNearBand, 0.0f,
                                quant8_internal::kNearBand}) {
            around((k + e + search.offset[r]) / search.slope[r]);
          }
        }
      }
    }
    for (const uint32_t sign : {0u, 0x80000000u}) {
      std::vector<float> x(kQuant8Block);
      std::vector<uint8_t> want(kQuant8Block), got(kQuant8Block);
      float max_want, max_got;
      size_t differ = 0;
      uint32_t first_bad = 0;
      for (size_t at = 0; at < tried.size();) {
        x[0] = 1.0f;
        size_t n = 1;
        for (; n < kQuant8Block && at < tried.size(); ++n, ++at) {
          const uint32_t b = tried[at] | sign;
          std::memcpy(&x[n], &b, 4);
        }
        QuantizeBlockwiseScalar(x.data(), n, kQuant8Block, map, want.data(),
                                &max_want);
        QuantizeBlockwise(x.data(), n, kQuant8Block, map, got.data(),
                          &max_got);
        for (size_t i = 0; i < n; ++i) {
          if (want[i] != got[i] && differ++ == 0) first_bad = FloatBits(x[i]);
        }
      }
      EXPECT_EQ(differ, 0u) << "first at bits 0x" << std::hex << first_bad;
    }
  }
}

// The kernel takes |y| as |x| times 1/m, an ulp from the quotient: the
// floats around m times every threshold, for fresh random maxima m, get
// the reference's codes.
TEST(Quant8Test, ThresholdsTimesRandomMaximaEqualTheReference) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (const Quant8Map map : {Quant8Map::kSigned, Quant8Map::kUnsigned}) {
    const std::array<float, 256>& v = DynamicMap(map);
    for (int trial = 0; trial < 8; ++trial) {
      const float m = static_cast<float>(std::ldexp(mantissa(rng), exponent(rng)));
      std::vector<float> x = {m};
      for (int j = 0; j < 255; ++j) {
        const double t = (static_cast<double>(v[j]) + v[j + 1]) / 2;
        float f = static_cast<float>(t * m);
        for (int k = 0; k < 6; ++k) f = std::nextafter(f, 0.0f);
        for (int k = 0; k < 13; ++k, f = std::nextafter(f, 2 * m)) {
          if (std::fabs(f) <= m) x.push_back(f);
        }
      }
      const size_t n = x.size(), blocks = Quant8Blocks(n, kQuant8Block);
      ASSERT_EQ(blocks, 2u);
      x.insert(x.begin() + kQuant8Block, m);  // block 2's maximum, too
      std::vector<uint8_t> want(n + 1), got(n + 1);
      std::vector<float> want_max(blocks), got_max(blocks);
      ASSERT_TRUE(Quantize(x, kQuant8Block, map, want, want_max).ok());
      QuantizeBlockwise(x.data(), n + 1, kQuant8Block, map, got.data(),
                        got_max.data());
      for (size_t i = 0; i <= n; ++i) {
        ASSERT_EQ(want[i], got[i]) << "x = " << x[i] << ", m = " << m;
      }
    }
  }
}

// The 8-bit Adam refuses a block whose m or v is not finite from the
// block's maximum alone: NaN for an infinity or a NaN anywhere, the tail
// lanes of a short block included.
TEST(Quant8Test, BlockAbsMaxIsNaNForANonFiniteElement) {
  for (const size_t n : {1u, 15u, 16u, 17u, 2048u, 2047u}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (i + 1);
    EXPECT_EQ(BlockAbsMax(x.data(), n), static_cast<float>(n));
    for (const size_t at : {size_t{0}, n / 2, n - 1}) {
      for (const float bad : {std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              -std::numeric_limits<float>::quiet_NaN()}) {
        const float keep = x[at];
        x[at] = bad;
        EXPECT_TRUE(std::isnan(BlockAbsMax(x.data(), n)))
            << "n " << n << ", element " << at << " = " << bad;
        x[at] = keep;
      }
    }
  }
}

TEST(Quant8Test, ZeroBlocksAndSignedZeros) {
  const std::vector<float> x = {0.0f, -0.0f, 0.0f, 4.0f, -0.0f, 0.0f};
  std::vector<uint8_t> codes(6, 77);
  std::vector<float> absmax(2, -1.0f);
  ASSERT_TRUE(Quantize(x, 3, Quant8Map::kSigned, codes,
                                         absmax)
                  .ok());
  EXPECT_EQ(absmax[0], 0.0f);
  EXPECT_EQ(absmax[1], 4.0f);
  for (int i : {0, 1, 2, 4, 5}) EXPECT_EQ(codes[i], ZeroCode(Quant8Map::kSigned));
  EXPECT_EQ(codes[3], 255);
  std::vector<float> out(6, 9.0f);
  ASSERT_TRUE(Dequantize(codes, absmax, 3,
                                           Quant8Map::kSigned, out)
                  .ok());
  for (int i : {0, 1, 2, 4, 5}) EXPECT_EQ(out[i], 0.0f);
  EXPECT_EQ(out[3], 4.0f);
}

TEST(Quant8Test, BadInputIsRefusedAndWritesNothing) {
  std::vector<float> x(10, 1.0f);
  std::vector<uint8_t> codes(10, 7);
  std::vector<float> absmax(Quant8Blocks(10, 4), 5.0f);
  ASSERT_EQ(absmax.size(), 3u);
  auto untouched = [&] {
    for (uint8_t c : codes) EXPECT_EQ(c, 7);
    for (float a : absmax) EXPECT_EQ(a, 5.0f);
  };
  absl::Status s =
      Quantize(x, 0, Quant8Map::kSigned, codes, absmax);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = Quantize(x, 4, Quant8Map::kSigned,
                                 absl::MakeSpan(codes).subspan(1), absmax);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("need 10 codes and 3 scales; got 9 and 3"),
            std::string::npos)
      << s;
  s = Quantize(x, 4, Quant8Map::kSigned, codes,
                                 absl::MakeSpan(absmax).subspan(1));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    x[6] = bad;
    s = Quantize(x, 4, Quant8Map::kUnsigned, codes, absmax);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find("element 6 is not finite"), std::string::npos)
        << s;
  }
  untouched();
  std::vector<float> out(10, 3.0f);
  s = Dequantize(codes, absl::MakeSpan(absmax).subspan(1), 4,
                                   Quant8Map::kSigned, out);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = Dequantize(codes, absmax, 0, Quant8Map::kSigned, out);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  for (float o : out) EXPECT_EQ(o, 3.0f);
  EXPECT_EQ(Quant8Blocks(0, 2048), 0u);
  EXPECT_EQ(Quant8Blocks(2048, 2048), 1u);
  EXPECT_EQ(Quant8Blocks(2049, 2048), 2u);
}

}  // namespace
}  // namespace quant8_test
}  // namespace zeroshard
