// LayerNorm fast path (AVX-512 row kernels when the CPU has them) against the
// scalar reference on fresh random inputs: widths not multiples of 16 and row
// counts large enough to go parallel, forward and backward (dx accumulated,
// dgamma/dbeta accumulated), and bit-for-bit repeatability.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/layernorm.h"

namespace zeroshard::kernels::cpu {
namespace {

std::vector<float> RandomValues(size_t n, float scale, float offset = 0.0f) {
  static std::mt19937 rng(
      static_cast<uint32_t>(zeroshard::testing::TestSeed()));
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = offset + u(rng);
  return v;
}

void ExpectNear(const char* what, const std::vector<float>& got,
                const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i])))
        << what << " at " << i;
  }
}

struct Case {
  int64_t m, c;
};

class LayerNormFastTest : public ::testing::TestWithParam<Case> {};

TEST_P(LayerNormFastTest, MatchesReference) {
  const auto [m, c] = GetParam();
  // An offset mean tests the two-pass variance.
  auto x = RandomValues(m * c, 2.0f, 3.0f), g = RandomValues(c, 1.5f), b = RandomValues(c, 1.0f);
  auto dy = RandomValues(m * c, 1.0f), dx0 = RandomValues(m * c, 1.0f);
  auto dg0 = RandomValues(c, 1.0f), db0 = RandomValues(c, 1.0f);
  std::vector<float> y(m * c), mean(m), rstd(m);
  std::vector<float> yr(m * c), meanr(m), rstdr(m);
  ASSERT_TRUE(LayerNormForward(x.data(), g.data(), b.data(), m, c, y.data(),
                               mean.data(), rstd.data()).ok());
  ASSERT_TRUE(LayerNormForwardReference(x.data(), g.data(), b.data(), m, c,
                                        yr.data(), meanr.data(), rstdr.data()).ok());
  ExpectNear("y", y, yr, 2e-5f);
  ExpectNear("mean", mean, meanr, 2e-6f);
  ExpectNear("rstd", rstd, rstdr, 2e-5f);

  auto dx = dx0, dg = dg0, db = db0;
  auto dxr = dx0, dgr = dg0, dbr = db0;
  ASSERT_TRUE(LayerNormBackward(dy.data(), x.data(), g.data(), meanr.data(),
                                rstdr.data(), m, c, dx.data(), dg.data(), db.data()).ok());
  ASSERT_TRUE(LayerNormBackwardReference(dy.data(), x.data(), g.data(), meanr.data(),
                                         rstdr.data(), m, c, dxr.data(), dgr.data(),
                                         dbr.data()).ok());
  ExpectNear("dx", dx, dxr, 5e-5f);
  // Column sums over m rows: FP32 rounding grows with m.
  ExpectNear("dgamma", dg, dgr, 1e-5f * static_cast<float>(m));
  ExpectNear("dbeta", db, dbr, 1e-5f * static_cast<float>(m));

  // Repeatable bit for bit (deterministic sums).
  std::vector<float> y2(m * c), mean2(m), rstd2(m);
  ASSERT_TRUE(LayerNormForward(x.data(), g.data(), b.data(), m, c, y2.data(),
                               mean2.data(), rstd2.data()).ok());
  EXPECT_EQ(y, y2);
  auto dx2 = dx0, dg2 = dg0, db2 = db0;
  ASSERT_TRUE(LayerNormBackward(dy.data(), x.data(), g.data(), meanr.data(),
                                rstdr.data(), m, c, dx2.data(), dg2.data(), db2.data()).ok());
  EXPECT_EQ(dx, dx2);
  EXPECT_EQ(dg, dg2);
  EXPECT_EQ(db, db2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormFastTest,
                         ::testing::Values(Case{1, 1}, Case{3, 7}, Case{5, 16},
                                           Case{9, 37}, Case{17, 100},
                                           Case{700, 515}, Case{1030, 512}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "m" + std::to_string(info.param.m) + "c" +
                                  std::to_string(info.param.c);
                         });

TEST(LayerNormFastTest, RejectsBadSizes) {
  float v = 0;
  EXPECT_FALSE(LayerNormForward(&v, &v, &v, 0, 4, &v, &v, &v).ok());
  EXPECT_FALSE(LayerNormBackward(&v, &v, &v, &v, &v, 2, -1, &v, &v, &v).ok());
}

TEST(LayerNormFastTest, ReportsWhichPathRan) {
  // Not an assertion on speed: records whether the AVX-512 path was tested.
  RecordProperty("avx512", Avx512Available() ? "yes" : "no");
  if (!Avx512Available()) GTEST_SKIP() << "no AVX-512: fast path is the reference";
}

}  // namespace
}  // namespace zeroshard::kernels::cpu
