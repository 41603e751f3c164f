// The CPU twins of the CUDA kernels (model/kernels/cpu/twins.h), which run
// the device's per-element and per-row functions (model/kernels/
// element_math.h), against the CPU references on fresh random inputs: so the
// arithmetic a GPU runs is checked on every machine. The device kernels are
// compared with these twins in kernels_cuda_test (on a GPU).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "common/grad_clip.h"
#include "gtest/gtest.h"
#include "tests/support/expect_close.h"
#include "tests/support/test_seed.h"
#include "model/kernels/cpu/cpu_kernels.h"
#include "model/kernels/cpu/twins.h"

namespace zeroshard::kernels::cpu {
namespace {

class TwinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = zeroshard::testing::TestSeed();
    rng_.seed(seed_);
  }
  std::vector<float> Random(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 float abs, float rel, const char* what) {
  zeroshard::testing::ExpectAllClose(got, want, abs, rel, what, "twin",
                                     "reference");
}

TEST_F(TwinTest, GeluMatchesTheReference) {
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed_));
  const int64_t n = 100003;
  std::vector<float> x = Random(n, 3.0f), dy = Random(n);
  // The tails, where tanh saturates, and zero.
  x[0] = 0.0f;
  x[1] = -12.0f;
  x[2] = 12.0f;
  std::vector<float> y(n), want(n), dx(n), want_dx(n);
  GeluForwardTwin(x.data(), y.data(), n);
  GeluForwardReference(x.data(), want.data(), n);
  GeluBackwardTwin(x.data(), dy.data(), dx.data(), n);
  GeluBackwardReference(x.data(), dy.data(), want_dx.data(), n);
  // FP32 tanh against the double reference: tanhf's error scaled by |x|
  // (forward) and, through 1 - tanh^2 near saturation, by |x du| (backward),
  // where it is also multiplied by dy: the bound the CPU fast paths are held
  // to (kernels_ops_test), times (1 + |dy|) for the product (2 ulp of a dx
  // of 3.09 exceeded the bound without it, seed 1658676432056085301).
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(y[i], want[i], 4e-7f * (1.0f + std::fabs(x[i]))) << x[i];
    ASSERT_NEAR(dx[i], want_dx[i],
                4e-7f * (1.0f + x[i] * x[i] * x[i] * x[i]) *
                    (1.0f + std::fabs(dy[i])))
        << x[i] << " dy " << dy[i];
  }
}

TEST_F(TwinTest, LayerNormMatchesTheReference) {
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed_));
  for (const int64_t c : {1, 7, 128, 768, 1601}) {
    const int64_t m = 37;
    SCOPED_TRACE(::testing::Message() << "c " << c);
    // An offset mean, as residual streams have.
    std::vector<float> x = Random(m * c, 2.0f);
    for (float& v : x) v += 3.0f;
    const std::vector<float> gamma = Random(c), beta = Random(c),
                             dy = Random(m * c);
    std::vector<float> y(m * c), mean(m), rstd(m);
    std::vector<float> wy(m * c), wmean(m), wrstd(m);
    ASSERT_TRUE(LayerNormForwardTwin(x.data(), gamma.data(), beta.data(), m, c,
                                     y.data(), mean.data(), rstd.data())
                    .ok());
    ASSERT_TRUE(LayerNormForwardReference(x.data(), gamma.data(), beta.data(),
                                          m, c, wy.data(), wmean.data(),
                                          wrstd.data())
                    .ok());
    ExpectClose(mean, wmean, 1e-6f, 1e-6f, "mean");
    ExpectClose(rstd, wrstd, 0.0f, 1e-5f, "rstd");
    ExpectClose(y, wy, 1e-5f, 1e-5f, "y");
    // Backward accumulates: start from the same nonzero buffers.
    std::vector<float> dx = Random(m * c), dg = Random(c), db = Random(c);
    std::vector<float> wdx = dx, wdg = dg, wdb = db;
    ASSERT_TRUE(LayerNormBackwardTwin(dy.data(), x.data(), gamma.data(),
                                      mean.data(), rstd.data(), m, c, dx.data(),
                                      dg.data(), db.data())
                    .ok());
    ASSERT_TRUE(LayerNormBackwardReference(dy.data(), x.data(), gamma.data(),
                                           mean.data(), rstd.data(), m, c,
                                           wdx.data(), wdg.data(), wdb.data())
                    .ok());
    ExpectClose(dx, wdx, 2e-5f, 1e-4f, "dx");
    ExpectClose(dg, wdg, 1e-5f, 1e-5f, "dgamma");
    ExpectClose(db, wdb, 1e-5f, 1e-5f, "dbeta");
  }
}

TEST_F(TwinTest, CrossEntropyMatchesTheReference) {
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed_));
  for (const int64_t vocab : {2, 256, 50257}) {
    const int64_t m = vocab > 1000 ? 9 : 65;
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    const std::vector<float> logits = Random(m * vocab, 4.0f);
    std::vector<int32_t> targets(m);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
    for (int32_t& t : targets) t = tok(rng_);
    std::vector<float> d(m * vocab), wd(m * vocab);
    double loss = 0, want = 0;
    ASSERT_TRUE(SoftmaxCrossEntropyTwin(logits.data(), targets.data(), m, vocab,
                                        1024.0f, &loss, d.data())
                    .ok());
    ASSERT_TRUE(SoftmaxCrossEntropy(logits.data(), targets.data(), m, vocab,
                                    1024.0f, &want, wd.data())
                    .ok());
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want) + 1e-6);
    ExpectClose(d, wd, 1e-6f * 1024.0f / m, 1e-5f, "dlogits");
    // In place, as the model calls it.
    std::vector<float> inplace = logits;
    double loss2 = 0;
    ASSERT_TRUE(SoftmaxCrossEntropyTwin(inplace.data(), targets.data(), m,
                                        vocab, 1024.0f, &loss2, inplace.data())
                    .ok());
    EXPECT_EQ(loss2, loss);
    EXPECT_EQ(inplace, d);
  }
  // A target outside the vocabulary: an error, nothing written.
  std::vector<float> logits(8, 0.5f), d(8, -7.0f);
  const int32_t bad[2] = {1, 4};
  double loss = -1;
  EXPECT_EQ(SoftmaxCrossEntropyTwin(logits.data(), bad, 2, 4, 1.0f, &loss,
                                    d.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loss, -1);
  EXPECT_EQ(d, std::vector<float>(8, -7.0f));
}

TEST_F(TwinTest, GradNormTermsMatchGradClip) {
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed_));
  std::vector<float> g = Random(300007, 1e-2f);
  double sum_sq = 0;
  int64_t bad = -1;
  GradNormTermsTwin(g.data(), static_cast<int64_t>(g.size()), &sum_sq, &bad);
  EXPECT_EQ(bad, 0);
  const double want = GradSumOfSquaresReference(absl::MakeConstSpan(g));
  EXPECT_NEAR(sum_sq, want, 1e-12 * want);
  g[17] = std::numeric_limits<float>::infinity();
  g[99] = std::numeric_limits<float>::quiet_NaN();
  GradNormTermsTwin(g.data(), static_cast<int64_t>(g.size()), &sum_sq, &bad);
  EXPECT_EQ(bad, 2);
  EXPECT_FALSE(std::isfinite(sum_sq));
}

TEST_F(TwinTest, BadSizesAreRefused) {
  float x[4] = {}, g[4] = {}, b[4] = {}, y[4] = {}, mu[1], rs[1];
  EXPECT_EQ(LayerNormForwardTwin(x, g, b, 0, 4, y, mu, rs).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerNormForwardTwin(x, g, b, 1, -4, y, mu, rs).code(),
            absl::StatusCode::kInvalidArgument);
  double loss;
  const int32_t t[1] = {0};
  EXPECT_EQ(SoftmaxCrossEntropyTwin(x, t, 1, 0, 1.0f, &loss, y).code(),
            absl::StatusCode::kInvalidArgument);
}

// RMSNorm's twin (the device's order: a row's sums, the gain gradient per
// channel in row order) against the double reference; RoPE, SwiGLU and the
// grouped heads' fast CPU paths are their own twins (kernels_llama_test).
TEST_F(TwinTest, RmsNormTwinMatchesTheReference) {
  const int64_t m = 37, c = 300;
  const auto x = Random(m * c, 2.0f), g = Random(c), dy = Random(m * c);
  std::vector<float> y(m * c), rstd(m), yr(m * c), rstdr(m);
  ASSERT_TRUE(RmsNormForwardTwin(x.data(), g.data(), m, c, 1e-5f, y.data(), rstd.data()).ok());
  ASSERT_TRUE(RmsNormForwardReference(x.data(), g.data(), m, c, 1e-5f, yr.data(),
                                      rstdr.data()).ok());
  ExpectClose(y, yr, 1e-6f, 2e-6f, "y");
  ExpectClose(rstd, rstdr, 0, 2e-6f, "rstd");
  std::vector<float> dx(m * c, 0.5f), dg(c, -0.25f);
  std::vector<float> dxr = dx, dgr = dg;
  ASSERT_TRUE(RmsNormBackwardTwin(dy.data(), x.data(), g.data(), rstdr.data(), m, c,
                                  dx.data(), dg.data()).ok());
  ASSERT_TRUE(RmsNormBackwardReference(dy.data(), x.data(), g.data(), rstdr.data(), m, c,
                                       dxr.data(), dgr.data()).ok());
  ExpectClose(dx, dxr, 2e-6f, 4e-6f, "dx");
  ExpectClose(dg, dgr, 2e-5f, 2e-5f, "dg");
  EXPECT_FALSE(RmsNormForwardTwin(x.data(), g.data(), 0, c, 1e-5f, y.data(), rstd.data()).ok());
}

}  // namespace
}  // namespace zeroshard::kernels::cpu
