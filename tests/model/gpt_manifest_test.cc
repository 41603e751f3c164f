#include "model/gpt_manifest.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

// Each tensor states its init rule and parameter class (the servers read no
// names): GPT-2's N(0, std) matrices and embeddings, residual projections at
// std / sqrt(2 * layers), zero biases, unit LayerNorm gains.
TEST(GptManifestTest, EveryTensorStatesGpt2sInitRuleAndClass) {
  const GptShape s{3, 2, 8, 16, 4};
  auto m = MakeGptManifest(s, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->arch, "gpt2");
  int seen = 0;
  for (const UnitSpec& u : m->units) {
    for (const TensorSpec& t : u.tensors) {
      ++seen;
      const bool bias = t.name.size() > 5 &&
                        t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
      const bool embedding = t.name == "wte.weight" || t.name == "wpe.weight";
      const bool residual = t.name.find("c_proj.weight") != std::string::npos;
      SCOPED_TRACE(t.name);
      if (bias) {
        EXPECT_EQ(t.init.kind, InitRule::Kind::kZeros);
        EXPECT_EQ(t.param_class, TensorClass::kBias);
      } else if (t.shape.size() == 1) {
        EXPECT_EQ(t.init.kind, InitRule::Kind::kOnes);
        EXPECT_EQ(t.param_class, TensorClass::kNorm);
      } else {
        EXPECT_EQ(t.init.kind, InitRule::Kind::kNormal);
        EXPECT_EQ(t.init.std_divisor, residual ? std::sqrt(6.0) : 1.0);
        EXPECT_EQ(t.param_class,
                  embedding ? TensorClass::kEmbedding : TensorClass::kMatrix);
      }
    }
  }
  EXPECT_EQ(seen, 2 + 12 * 3 + 2);
}

TEST(GptManifestTest, ParamCountEqualsSumOfTensors) {
  const GptShape shapes[] = {{1, 1, 8, 16, 4},
                             {4, 4, 128, 256, 128},
                             {8, 8, 512, 256, 256},
                             {12, 12, 768, 50257, 1024},
                             {3, 2, 6, 7, 5}};
  for (const GptShape& s : shapes) {
    auto m = MakeGptManifest(s, 4);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->partition_count, 4u);
    uint64_t sum = 0;
    for (const UnitSpec& u : m->units) {
      for (const TensorSpec& t : u.tensors) {
        uint64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        sum += numel;
      }
    }
    EXPECT_EQ(GptParamCount(s), sum) << s.layers << "x" << s.width;
    ASSERT_EQ(m->units.size(), static_cast<size_t>(s.layers) + 2);
    EXPECT_EQ(m->units.front().name, "embedding");
    EXPECT_EQ(m->units[1].name, "block_0");
    EXPECT_EQ(m->units.back().name, "final");
    auto layout = FlatLayout::Create(*m, 3, 2);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->param_elems(), GptParamCount(s));
    EXPECT_TRUE(layout->FindTensor("h.0.attn.c_attn.weight").ok());
    EXPECT_TRUE(layout->FindTensor("wte.weight").ok());
  }
  // GPT-2 small (124M with a tied head).
  EXPECT_EQ(GptParamCount({12, 12, 768, 50257, 1024}), 124439808u);
}

TEST(GptManifestTest, RejectsBadShapes) {
  EXPECT_FALSE(ValidateGptShape({0, 1, 8, 16, 4}).ok());
  EXPECT_FALSE(ValidateGptShape({1, 0, 8, 16, 4}).ok());
  EXPECT_FALSE(ValidateGptShape({1, 1, -8, 16, 4}).ok());
  EXPECT_FALSE(ValidateGptShape({1, 1, 8, 0, 4}).ok());
  EXPECT_FALSE(ValidateGptShape({1, 1, 8, 16, 0}).ok());
  const absl::Status s = ValidateGptShape({2, 3, 8, 16, 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("divisible"), absl::string_view::npos);
  EXPECT_FALSE(MakeGptManifest({2, 3, 8, 16, 4}, 1).ok());
  EXPECT_TRUE(ValidateGptShape({2, 2, 8, 16, 4}).ok());
}

}  // namespace
}  // namespace zeroshard
