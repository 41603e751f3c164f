// Llama's CPU kernels (RMSNorm, rotary embeddings, SwiGLU, grouped key/value
// heads on the attention kernel): each fast path against its scalar
// reference on fresh random inputs, and both against torch's own ops
// (tests/fixtures/make_llama_ops_golden.py, Hugging Face's formulas) with
// their gradients.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/grouped_qkv.h"
#include "model/kernels/cpu/rmsnorm.h"
#include "model/kernels/cpu/rope.h"
#include "model/kernels/cpu/swiglu.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_json.h"
#include "tests/support/test_seed.h"

namespace zeroshard::kernels::cpu {
namespace {
namespace llama_test {  // apart from the other kernel tests of a unity build

using testing::GoldenFloats;

std::mt19937& Rng() {
  static std::mt19937 rng(static_cast<uint32_t>(zeroshard::testing::TestSeed()));
  return rng;
}

std::vector<float> Random(size_t n, float scale, float offset = 0) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = offset + u(Rng());
  return v;
}

// |got - want| <= tol * (1 + |want|) everywhere, else the first place not.
void ExpectClose(const char* what, const std::vector<float>& got,
                 const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  }
}

const nlohmann::json& Golden() {
  static const nlohmann::json* const doc = [] {
    std::ifstream in("tests/fixtures/llama_ops_golden.json");
    auto* j = new nlohmann::json(nlohmann::json::parse(in, nullptr, /*throw=*/false));
    return j;
  }();
  return *doc;
}

const nlohmann::json& Case(const char* name) {
  EXPECT_TRUE(Golden().is_object()) << "cannot read tests/fixtures/llama_ops_golden.json";
  return Golden().at("cases").at(name);
}

TEST(LlamaKernelsTest, RmsNormMatchesItsReferenceOnRandomRows) {
  for (const auto& [m, c] : std::vector<std::pair<int64_t, int64_t>>{{7, 37}, {300, 1024}}) {
    const auto x = Random(m * c, 2, 0.5f), g = Random(c, 0.5f, 1), dy = Random(m * c, 1);
    std::vector<float> y(m * c), rstd(m), yr(m * c), rstdr(m);
    ASSERT_TRUE(RmsNormForward(x.data(), g.data(), m, c, 1e-5f, y.data(), rstd.data()).ok());
    ASSERT_TRUE(RmsNormForwardReference(x.data(), g.data(), m, c, 1e-5f, yr.data(),
                                        rstdr.data()).ok());
    ExpectClose("y", y, yr, 2e-6);
    ExpectClose("rstd", rstd, rstdr, 2e-6);
    // dx and dg accumulate onto what is there.
    auto dx = Random(m * c, 1), dg = Random(c, 1);
    auto dxr = dx, dgr = dg;
    ASSERT_TRUE(RmsNormBackward(dy.data(), x.data(), g.data(), rstdr.data(), m, c,
                                dx.data(), dg.data()).ok());
    ASSERT_TRUE(RmsNormBackwardReference(dy.data(), x.data(), g.data(), rstdr.data(), m,
                                         c, dxr.data(), dgr.data()).ok());
    ExpectClose("dx", dx, dxr, 5e-6);
    ExpectClose("dg", dg, dgr, 2e-5 * std::sqrt(static_cast<double>(m)));
  }
  std::vector<float> one(4);
  EXPECT_FALSE(RmsNormForward(one.data(), one.data(), 0, 4, 1e-5f, one.data(), one.data()).ok());
  EXPECT_FALSE(RmsNormForward(one.data(), one.data(), 1, 4, 0, one.data(), one.data()).ok());
}

TEST(LlamaKernelsTest, RmsNormEqualsTorch) {
  const nlohmann::json& c = Case("rmsnorm");
  const int64_t m = c.at("m"), w = c.at("c");
  const auto x = GoldenFloats(c.at("x")), g = GoldenFloats(c.at("g")), r = GoldenFloats(c.at("r"));
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference" : "fast");
    std::vector<float> y(m * w), rstd(m), dx(m * w, 0.0f), dg(w, 0.0f);
    auto fwd = reference ? RmsNormForwardReference : RmsNormForward;
    auto bwd = reference ? RmsNormBackwardReference : RmsNormBackward;
    ASSERT_TRUE(fwd(x.data(), g.data(), m, w, c.at("eps").get<float>(), y.data(), rstd.data()).ok());
    ASSERT_TRUE(bwd(r.data(), x.data(), g.data(), rstd.data(), m, w, dx.data(), dg.data()).ok());
    ExpectClose("y", y, GoldenFloats(c.at("y")), 2e-6);
    ExpectClose("dx", dx, GoldenFloats(c.at("dx")), 4e-6);
    ExpectClose("dg", dg, GoldenFloats(c.at("dg")), 4e-6);
  }
}

TEST(LlamaKernelsTest, RopeMatchesItsReferenceAndInvertsItself) {
  const int64_t seq = 37, d = 64, heads = 3, stride = 5 * 64, m = 2 * seq;
  absl::StatusOr<RopeTable> made = RopeTable::Make(seq, d, 500000.0);
  ASSERT_TRUE(made.ok()) << made.status();
  const RopeTable& t = *made;
  const auto x = Random(m * stride, 2);
  auto y = x, yr = x;
  ASSERT_TRUE(RopeForward(t, y.data(), m, heads, stride).ok());
  ASSERT_TRUE(RopeForwardReference(t, yr.data(), m, heads, stride).ok());
  // The table's angles are FP32, as torch's: at position 36 an angle of 36
  // carries 36 * 2^-24 of error into cos and sin.
  ExpectClose("y", y, yr, 1e-5);
  for (int64_t r = 0; r < m; ++r) {  // the columns after the heads untouched
    for (int64_t j = heads * d; j < stride; ++j) {
      ASSERT_EQ(y[r * stride + j], x[r * stride + j]);
    }
  }
  // Position 0 is the identity; the backward (the inverse rotation) undoes
  // the forward.
  for (int64_t j = 0; j < heads * d; ++j) ASSERT_EQ(y[j], x[j]);
  ASSERT_TRUE(RopeBackward(t, y.data(), m, heads, stride).ok());
  ExpectClose("round trip", y, x, 1e-6);
  EXPECT_FALSE(RopeTable::Make(4, 7, 10000).ok());
  EXPECT_FALSE(RopeTable::Make(4, 8, 1).ok());
  EXPECT_FALSE(RopeForward(t, y.data(), m + 1, heads, stride).ok());
  EXPECT_FALSE(RopeForward(t, y.data(), m, 6, stride).ok());
}

TEST(LlamaKernelsTest, RopeEqualsTorch) {
  const nlohmann::json& c = Case("rope");
  const int64_t b = c.at("batch"), h = c.at("heads"), seq = c.at("seq"), d = c.at("head_dim");
  absl::StatusOr<RopeTable> made = RopeTable::Make(seq, d, c.at("theta").get<double>());
  ASSERT_TRUE(made.ok()) << made.status();
  const RopeTable& t = *made;
  auto y = GoldenFloats(c.at("x"));
  auto dx = GoldenFloats(c.at("r"));
  ASSERT_TRUE(RopeForward(t, y.data(), b * seq, h, h * d).ok());
  ASSERT_TRUE(RopeBackward(t, dx.data(), b * seq, h, h * d).ok());
  ExpectClose("y", y, GoldenFloats(c.at("y")), 1e-6);
  ExpectClose("dx", dx, GoldenFloats(c.at("dx")), 1e-6);
}

TEST(LlamaKernelsTest, SwiGluMatchesItsReferenceAndTorch) {
  const int64_t m = 33, f = 300;
  const auto gu = Random(m * 2 * f, 8), da = Random(m * f, 1);
  std::vector<float> a(m * f), ar(m * f), dgu(m * 2 * f), dgur(m * 2 * f);
  ASSERT_TRUE(SwiGluForward(gu.data(), m, f, a.data()).ok());
  ASSERT_TRUE(SwiGluForwardReference(gu.data(), m, f, ar.data()).ok());
  ExpectClose("a", a, ar, 1e-6);
  ASSERT_TRUE(SwiGluBackward(gu.data(), da.data(), m, f, dgu.data()).ok());
  ASSERT_TRUE(SwiGluBackwardReference(gu.data(), da.data(), m, f, dgur.data()).ok());
  ExpectClose("dgu", dgu, dgur, 2e-6);
  // The device's twin (expf per element) against the same reference.
  std::vector<float> at(m * f), dgut(m * 2 * f);
  ASSERT_TRUE(SwiGluForwardTwin(gu.data(), m, f, at.data()).ok());
  ASSERT_TRUE(SwiGluBackwardTwin(gu.data(), da.data(), m, f, dgut.data()).ok());
  ExpectClose("twin a", at, ar, 1e-6);
  ExpectClose("twin dgu", dgut, dgur, 2e-6);

  const nlohmann::json& c = Case("swiglu");
  const int64_t gm = c.at("m"), gf = c.at("f");
  const auto ggu = GoldenFloats(c.at("gu")), r = GoldenFloats(c.at("r"));
  std::vector<float> ga(gm * gf), gdgu(gm * 2 * gf);
  ASSERT_TRUE(SwiGluForward(ggu.data(), gm, gf, ga.data()).ok());
  ASSERT_TRUE(SwiGluBackward(ggu.data(), r.data(), gm, gf, gdgu.data()).ok());
  ExpectClose("torch a", ga, GoldenFloats(c.at("a")), 1e-6);
  ExpectClose("torch dgu", gdgu, GoldenFloats(c.at("dgu")), 2e-6);
  EXPECT_FALSE(SwiGluForward(ggu.data(), 0, gf, ga.data()).ok());
}

// Expand, then reduce the expanded copy as if it were a gradient: each
// key/value head comes back times its group size.
TEST(LlamaKernelsTest, GroupedHeadsExpandAndReduceAsRepeatKv) {
  const GroupedQkv g{.heads = 6, .kv_heads = 2, .head_dim = 5};
  const int64_t m = 4;
  const auto compact = Random(m * g.compact_width(), 1);
  std::vector<float> expanded(m * g.expanded_width()), back(m * g.compact_width());
  ASSERT_TRUE(ExpandGroupedQkv(g, compact.data(), m, expanded.data()).ok());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t q = 0; q < g.heads; ++q) {
      for (int64_t e = 0; e < g.head_dim; ++e) {
        const float* row = compact.data() + r * g.compact_width();
        const float* out = expanded.data() + r * g.expanded_width();
        const int64_t kv = q / 3;
        ASSERT_EQ(out[q * 5 + e], row[q * 5 + e]);
        ASSERT_EQ(out[(6 + q) * 5 + e], row[(6 + kv) * 5 + e]);
        ASSERT_EQ(out[(12 + q) * 5 + e], row[(8 + kv) * 5 + e]);
      }
    }
  }
  ASSERT_TRUE(ReduceGroupedQkvGrad(g, expanded.data(), m, back.data()).ok());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < g.compact_width(); ++j) {
      const float want = compact[r * g.compact_width() + j] * (j < 30 ? 1.0f : 3.0f);
      ASSERT_FLOAT_EQ(back[r * g.compact_width() + j], want) << j;
    }
  }
  EXPECT_FALSE(ExpandGroupedQkv({.heads = 6, .kv_heads = 4, .head_dim = 5}, compact.data(),
                                m, expanded.data()).ok());
}

// Grouped-query and multi-query causal attention through the multi-head
// kernel, forward and backward, against torch's repeat_kv attention.
TEST(LlamaKernelsTest, GroupedQueryAttentionEqualsTorch) {
  for (const char* name : {"gqa", "mqa"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& c = Case(name);
    const GroupedQkv g{.heads = c.at("heads"), .kv_heads = c.at("kv_heads"),
                       .head_dim = c.at("head_dim")};
    const int64_t b = c.at("batch"), t = c.at("seq"), m = b * t;
    const auto compact = GoldenFloats(c.at("qkv")), r = GoldenFloats(c.at("r"));
    std::vector<float> qkv(m * g.expanded_width()), y(m * g.heads * g.head_dim);
    std::vector<float> probs(b * g.heads * t * t), dqkv(qkv.size()), dcompact(compact.size());
    ASSERT_TRUE(ExpandGroupedQkv(g, compact.data(), m, qkv.data()).ok());
    const AttentionShape s{.batch = b, .seq = t, .width = g.heads * g.head_dim,
                           .heads = g.heads};
    ASSERT_TRUE(AttentionForward(s, qkv.data(), probs.data(), y.data()).ok());
    ASSERT_TRUE(AttentionBackward(s, qkv.data(), probs.data(), r.data(), dqkv.data()).ok());
    ASSERT_TRUE(ReduceGroupedQkvGrad(g, dqkv.data(), m, dcompact.data()).ok());
    ExpectClose("y", y, GoldenFloats(c.at("y")), 2e-6);
    ExpectClose("dqkv", dcompact, GoldenFloats(c.at("dqkv")), 4e-6);
  }
}

}  // namespace llama_test
}  // namespace
}  // namespace zeroshard::kernels::cpu
