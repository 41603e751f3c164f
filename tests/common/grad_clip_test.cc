// Gradient clipping: the sum of squares against a plain reference on fresh
// random inputs, non-finite detection, and the combined coefficient against
// torch.nn.utils.clip_grad_norm_ (tests/fixtures/make_clip_golden.py).
#include "common/grad_clip.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

TEST(GradClipTest, SumOfSquaresMatchesReference) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();  // fresh inputs each run
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.f, 3.f);
  for (size_t n : {0, 1, 7, 8, 9, 63, 1000, 4097, 100003}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    const double ref = GradSumOfSquaresReference(x);
    EXPECT_NEAR(GradSumOfSquares(x), ref, 1e-12 * ref + 1e-300) << "n=" << n << " seed=" << seed;
    EXPECT_TRUE(AllFinite(x));
  }
}

TEST(GradClipTest, NonFiniteAnywhereIsAnOverflow) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t pos : {0, 5, 12}) {
      std::vector<float> x(13, 1.f);
      x[pos] = bad;
      EXPECT_FALSE(AllFinite(x));
      const double s = GradSumOfSquares(x);
      EXPECT_FALSE(std::isfinite(s));
      // A non-finite partial poisons the all-reduced sum.
      const GradCoefficient c = ComputeGradCoefficient(s + 5.0, 1024, 1.0);
      EXPECT_TRUE(c.overflow);
      EXPECT_EQ(c.coefficient, 0);
    }
  }
  // The largest floats do not overflow the double accumulation.
  std::vector<float> big(1000, std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(GradSumOfSquares(big)));
  EXPECT_FALSE(ComputeGradCoefficient(GradSumOfSquares(big), 1, 1).overflow);
}

TEST(GradClipTest, NoClippingAndBadArguments) {
  GradCoefficient c = ComputeGradCoefficient(/*sumsq=*/1e6, /*loss_scale=*/8, /*max_norm=*/0);
  EXPECT_FALSE(c.overflow);
  EXPECT_DOUBLE_EQ(c.norm, 1000.0 / 8);
  EXPECT_EQ(c.clip_factor, 1);
  EXPECT_EQ(c.coefficient, 1.0 / 8);
  EXPECT_TRUE(ComputeGradCoefficient(1, 0, 1).overflow);
  EXPECT_TRUE(ComputeGradCoefficient(1, -2, 1).overflow);
  EXPECT_TRUE(ComputeGradCoefficient(1, 1, -1).overflow);
  EXPECT_TRUE(ComputeGradCoefficient(-1, 1, 1).overflow);
}

TEST(GradClipTest, MatchesTorchClipGradNorm) {
  std::ifstream in("tests/fixtures/clip_golden.json");
  ASSERT_TRUE(in.good()) << "tests/fixtures/clip_golden.json not found (run from the repo root)";
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_GE(golden.at("cases").size(), 3u);
  for (const auto& tc : golden.at("cases")) {
    const std::string name = tc.at("name");
    const double max_norm = tc.at("max_norm");
    const double torch_norm = tc.at("total_norm");
    std::vector<std::vector<float>> grads;
    for (const auto& t : tc.at("grads")) grads.push_back(t.get<std::vector<float>>());
    const auto clipped = tc.at("clipped");
    for (double loss_scale : {1.0, 1024.0, 65536.0}) {
      // Scale (exact: powers of two), then sum squares tensor by tensor as
      // several workers would, each over its own pieces.
      std::vector<std::vector<float>> scaled = grads;
      double total = 0;
      for (auto& t : scaled) {
        for (float& v : t) v *= static_cast<float>(loss_scale);
        total += GradSumOfSquares(t);
      }
      const GradCoefficient c = ComputeGradCoefficient(total, loss_scale, max_norm);
      ASSERT_FALSE(c.overflow) << name;
      EXPECT_NEAR(c.norm, torch_norm, 1e-5 * torch_norm) << name << " scale " << loss_scale;
      for (size_t k = 0; k < scaled.size(); ++k) {
        ScaleGradients(absl::MakeSpan(scaled[k]), static_cast<float>(c.coefficient));
        const std::vector<float> want = clipped[k].get<std::vector<float>>();
        ASSERT_EQ(want.size(), scaled[k].size());
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_NEAR(scaled[k][i], want[i], 2e-6 * std::fabs(want[i]) + 1e-30)
              << name << " tensor " << k << " elem " << i << " scale " << loss_scale;
        }
      }
    }
  }
}

}  // namespace
}  // namespace zeroshard
