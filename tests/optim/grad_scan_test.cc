// The scan of received gradients (optim/grad_scan.h): every kernel against
// the element-by-element reference on fresh random inputs, FP32 and BF16, at
// every length around the vector widths and at unaligned addresses, with
// NaN and Inf planted at random places; and the reference against
// std::isfinite / std::fabs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "optim/grad_scan.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace {

// n FP32 values (magnitudes across many binades, both signs) and their BF16
// roundings, after `skew` bytes so that the data is unaligned.
struct Grads {
  std::vector<char> f32, b16;
  size_t skew = 0;
  GradView View(bool bf16) const {
    return bf16 ? GradView{b16.data() + skew, true}
                : GradView{f32.data() + skew, false};
  }
  void Set(size_t i, float v) {
    std::memcpy(f32.data() + skew + 4 * i, &v, 4);
    const uint16_t h = FloatToBf16(v);
    std::memcpy(b16.data() + skew + 2 * i, &h, 2);
  }
};

Grads Random(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
  Grads g;
  g.skew = rng() % 7;
  g.f32.assign(g.skew + 4 * n, 0);
  g.b16.assign(g.skew + 2 * n, 0);
  for (size_t i = 0; i < n; ++i) {
    g.Set(i, normal(rng) * std::pow(2.0f, exponent(rng)));
  }
  return g;
}

float Value(const Grads& g, bool bf16, size_t i) {
  if (bf16) {
    uint16_t h;
    std::memcpy(&h, g.b16.data() + g.skew + 2 * i, 2);
    return Bf16ToFloat(h);
  }
  float f;
  std::memcpy(&f, g.f32.data() + g.skew + 4 * i, 4);
  return f;
}

TEST(GradScanTest, EveryKernelEqualsTheReference) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const std::vector<GradScanKernel> kernels = AvailableGradScanKernels();
  ASSERT_EQ(kernels.back().name, "scalar");
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min()};
  for (int trial = 0; trial < 400; ++trial) {
    // Lengths around every vector width and unroll, then some long ones.
    const size_t n = trial < 300 ? static_cast<size_t>(trial)
                                 : 300 + rng() % 20000;
    Grads g = Random(rng, n);
    if (n > 0 && trial % 3 != 0) {
      for (int k = 0, planted = 1 + static_cast<int>(rng() % 3); k < planted;
           ++k) {
        g.Set(rng() % n, specials[rng() % std::size(specials)]);
      }
    }
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " bf16=" << bf16
                                        << " skew=" << g.skew);
      // The reference against the plain definition.
      const GradScan want = ScanGradReference(g.View(bf16), n);
      bool finite = true;
      float max_abs = 0;
      size_t first_bad = n;
      for (size_t i = 0; i < n; ++i) {
        const float v = Value(g, bf16, i);
        if (!std::isfinite(v)) {
          finite = false;
          if (first_bad == n) first_bad = i;
        } else {
          max_abs = std::max(max_abs, std::fabs(v));
        }
      }
      ASSERT_EQ(want.finite(), finite);
      if (finite) ASSERT_EQ(want.max_abs(), max_abs);
      ASSERT_EQ(FirstNonFinite(g.View(bf16), n), first_bad);
      for (const GradScanKernel& k : kernels) {
        const GradScan got = k.fn(g.View(bf16), n);
        ASSERT_EQ(got.max_abs_bits, want.max_abs_bits) << k.name;
        ASSERT_EQ(got.bf16, bf16) << k.name;
      }
      ASSERT_EQ(ScanGrad(g.View(bf16), n).max_abs_bits, want.max_abs_bits);
    }
  }
}

TEST(GradScanTest, TheBoundKeepsTheSecondMomentFinite) {
  // The largest accepted scaled gradient squared, times Adam's (1 - beta2)
  // and added to a v as large, stays finite in FP32.
  const float g = static_cast<float>(kMaxScaledGrad);
  const float v = g * g;
  EXPECT_TRUE(std::isfinite(v));
  EXPECT_TRUE(std::isfinite(0.999f * v + 0.001f * g * g + v));
  // BF16 gradients at the bound are exactly it.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(g)), g);
}

}  // namespace
}  // namespace zeroshard
