#include "common/init_values.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "common/dtype.h"
#include "model/gpt_manifest.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace {

FlatLayout SmallGpt(int layers = 2) {
  auto m = MakeGptManifest({layers, 2, 32, 64, 16}, 2);
  EXPECT_TRUE(m.ok());
  auto layout = FlatLayout::Create(*m, 3, 2);
  EXPECT_TRUE(layout.ok());
  return *layout;
}

TEST(InitValuesTest, SubRangesEqualSlicesOfTheWholeFill) {
  const FlatLayout layout = SmallGpt();
  const uint64_t total = layout.total_elems();
  std::vector<float> whole(total);
  FillInitialValues(layout, 42, 0.02, {0, total}, whole.data());
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::vector<FlatRange> ranges;
  for (uint32_t k = 0; k < layout.num_servers(); ++k) ranges.push_back(layout.ServerRange(k));
  for (int i = 0; i < 50; ++i) {
    const uint64_t a = rng() % (total + 1), b = rng() % (total + 1);
    ranges.push_back({std::min(a, b), std::max(a, b)});
  }
  for (const FlatRange& r : ranges) {
    std::vector<float> part(r.size() + 1, 123.0f);
    FillInitialValues(layout, 42, 0.02, r, part.data());
    ASSERT_EQ(std::memcmp(part.data(), whole.data() + r.begin, r.size() * sizeof(float)), 0)
        << "[" << r.begin << ", " << r.end << ")";
    ASSERT_EQ(part[r.size()], 123.0f) << "wrote past the range";
  }
}

TEST(InitValuesTest, RulesByTensor) {
  const FlatLayout layout = SmallGpt(2);
  const uint64_t total = layout.total_elems();
  std::vector<float> w(total);
  FillInitialValues(layout, 7, 0.02, {0, total}, w.data());
  std::vector<bool> covered(total, false);
  for (const TensorInfo& t : layout.tensors()) {
    double sumsq = 0;
    for (uint64_t i = t.offset; i < t.offset + t.numel; ++i) {
      covered[i] = true;
      sumsq += static_cast<double>(w[i]) * w[i];
    }
    if (absl::EndsWith(t.name, ".bias")) {
      for (uint64_t i = 0; i < t.numel; ++i) ASSERT_EQ(w[t.offset + i], 0.0f) << t.name;
    } else if (t.shape.size() == 1) {
      for (uint64_t i = 0; i < t.numel; ++i) ASSERT_EQ(w[t.offset + i], 1.0f) << t.name;
    } else {
      const double sd = std::sqrt(sumsq / t.numel);
      const double want = absl::EndsWith(t.name, "c_proj.weight") ? 0.02 / std::sqrt(4.0) : 0.02;
      EXPECT_NEAR(sd, want, want * 0.15) << t.name;  // >= 1024 samples each
    }
  }
  for (uint64_t i = 0; i < total; ++i) {
    if (!covered[i]) {
      ASSERT_EQ(w[i], 0.0f) << "padding at " << i;
    }
  }
  // Another seed gives other values; the same seed the same ones.
  std::vector<float> w2(total), w3(total);
  FillInitialValues(layout, 8, 0.02, {0, total}, w2.data());
  FillInitialValues(layout, 7, 0.02, {0, total}, w3.data());
  EXPECT_NE(w, w2);
  EXPECT_EQ(w, w3);
}

TEST(InitValuesTest, CounterNormalIsStandardNormal) {
  double sum = 0, sumsq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = CounterNormal(99, i);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sumsq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sumsq / n, 1.0, 0.02);
  EXPECT_EQ(FloatBits(CounterNormal(5, 17)), FloatBits(CounterNormal(5, 17)));
  EXPECT_NE(CounterNormal(5, 17), CounterNormal(6, 17));
}

}  // namespace
}  // namespace zeroshard
