// The whole Llama's loss and gradients against a golden fixture made once by
// PyTorch 1.13 in float64 (tests/fixtures/make_llama_golden.py: Hugging
// Face's LlamaForCausalLM in plain torch ops, grouped key/value heads,
// rotary embeddings, SwiGLU, an untied head; BF16-representable weights).
//
// Stated tolerances, per tensor, with scale = max |golden grad| of the tensor:
//   FP32: loss relative 1e-5; every element |g - golden| <= 2e-5 * scale + 1e-7
//   BF16: loss relative 1e-2; ||g - golden||_2 <= 5e-2 * ||golden||_2
// Checkpointing (recompute of every block) gives the same bits as none.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "model/arch.h"
#include "model/gpt_forward_backward.h"
#include "model/llama.h"
#include "model/llama_manifest.h"
#include "nlohmann/json.hpp"
#include "optim/optimizer.h"

namespace zeroshard::model {
namespace {

struct LlamaGolden {
  ModelShape shape;
  int batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets;
  double loss = 0;
  std::vector<float> params, grads;  // manifest order, unpadded
};

bool ReadLlamaGolden(LlamaGolden* g) {
  std::ifstream in("tests/fixtures/llama_golden.bin", std::ios::binary);
  if (!in) return false;
  std::vector<char> b((std::istreambuf_iterator<char>(in)), {});
  size_t at = 0;
  auto take = [&](void* dst, size_t n) {
    if (at + n > b.size()) return false;
    std::memcpy(dst, b.data() + at, n);
    at += n;
    return true;
  };
  char magic[8];
  int32_t dims[10];
  double theta_eps[2];
  int64_t n = 0;
  if (!take(magic, 8) || std::memcmp(magic, "ZSLLMGLD", 8) != 0) return false;
  if (!take(dims, sizeof(dims)) || !take(theta_eps, sizeof(theta_eps)) || !take(&n, 8)) {
    return false;
  }
  g->shape = ModelShape{.layers = dims[0], .heads = dims[1], .width = dims[3],
                        .vocab = dims[5], .context = dims[6], .arch = "llama",
                        .kv_heads = dims[2], .mlp_width = dims[4],
                        .rope_theta = theta_eps[0], .norm_eps = theta_eps[1],
                        .tie_embeddings = dims[9] != 0};
  g->batch = dims[7];
  g->seq = dims[8];
  const size_t bt = static_cast<size_t>(g->batch) * g->seq;
  g->tokens.resize(bt);
  g->targets.resize(bt);
  g->params.resize(n);
  g->grads.resize(n);
  return take(g->tokens.data(), bt * 4) && take(g->targets.data(), bt * 4) &&
         take(&g->loss, 8) && take(g->params.data(), n * 4) &&
         take(g->grads.data(), n * 4) && at == b.size();
}

class LlamaGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(ReadLlamaGolden(&golden_)) << "cannot read tests/fixtures/llama_golden.bin";
    // Two partitions, so units carry padding that must be skipped.
    absl::StatusOr<ModelManifest> manifest = MakeLlamaManifest(golden_.shape, 2);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    absl::StatusOr<FlatLayout> layout = FlatLayout::Create(*manifest, 1, 2);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_.emplace(*layout);
    ASSERT_EQ(layout_->param_elems(), golden_.params.size());
    ASSERT_EQ(LlamaParamCount(golden_.shape), golden_.params.size());
    flat_.assign(layout_->total_elems(), 0.0f);
    size_t at = 0;
    for (const TensorInfo& t : layout_->tensors()) {
      std::copy_n(golden_.params.begin() + at, t.numel, flat_.begin() + t.offset);
      at += t.numel;
    }
  }

  // The loss, and the gradients in manifest order (unpadded).
  double Run(DType dtype, const CheckpointPolicy& policy, std::vector<float>* grads) {
    std::vector<uint16_t> half(flat_.size());
    const void* params = flat_.data();
    if (dtype == DType::kBf16) {
      FloatToBf16Array(flat_.data(), half.data(), flat_.size());
      params = half.data();
    }
    absl::StatusOr<const ModelArch*> arch = FindArch("llama");
    EXPECT_TRUE(arch.ok()) << arch.status();
    absl::StatusOr<std::unique_ptr<UnitModel>> model =
        (*arch)->MakeCpuModel(*layout_, golden_.shape, dtype, policy);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return NAN;
    std::vector<float> flat_grads(layout_->total_elems(), 0.0f);
    GptBatch batch{golden_.batch, golden_.seq, golden_.tokens, golden_.targets};
    absl::StatusOr<GptStepResult> r =
        GptForwardBackward(**model, *layout_, params, batch, 1.0f, absl::MakeSpan(flat_grads));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return NAN;
    grads->clear();
    for (const TensorInfo& t : layout_->tensors()) {
      grads->insert(grads->end(), flat_grads.begin() + t.offset,
                    flat_grads.begin() + t.offset + t.numel);
    }
    return r->loss;
  }

  template <typename Fn>
  void PerTensor(const std::vector<float>& got, Fn check) {
    size_t at = 0;
    for (const TensorInfo& t : layout_->tensors()) {
      check(t.name, got.data() + at, golden_.grads.data() + at, t.numel);
      at += t.numel;
    }
  }

  LlamaGolden golden_;
  std::optional<FlatLayout> layout_;
  std::vector<float> flat_;
};

TEST_F(LlamaGoldenTest, Fp32LossAndGradientsMatchTorch) {
  std::vector<float> grads;
  const double loss = Run(DType::kFp32, CheckpointPolicy{}, &grads);
  EXPECT_NEAR(loss, golden_.loss, 1e-5 * golden_.loss);
  PerTensor(grads, [&](const std::string& name, const float* g, const float* w, size_t n) {
    float scale = 0;
    for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(w[i]));
    ASSERT_GT(scale, 0.0f) << name << " has an all-zero golden gradient";
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(g[i], w[i], 2e-5f * scale + 1e-7f) << name << "[" << i << "]";
    }
  });
}

// BF16 against float64 torch, and against torch's own BF16 autocast on the
// same weights and batch (llama_autocast_golden.json): each tensor's
// gradient error at most twice autocast's (plus 2e-3), the loss's at most
// 1e-2 relative.
TEST_F(LlamaGoldenTest, Bf16StaysWithinItsBounds) {
  std::ifstream in("tests/fixtures/llama_autocast_golden.json");
  ASSERT_TRUE(in) << "cannot read tests/fixtures/llama_autocast_golden.json";
  const nlohmann::json autocast = nlohmann::json::parse(in);
  std::vector<float> grads;
  const double loss = Run(DType::kBf16, CheckpointPolicy{}, &grads);
  EXPECT_NEAR(loss, golden_.loss, 1e-2 * golden_.loss);
  double worst = 0, worst_torch = 0;
  PerTensor(grads, [&](const std::string& name, const float* g, const float* w, size_t n) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (g[i] - w[i]) * static_cast<double>(g[i] - w[i]);
      norm += static_cast<double>(w[i]) * w[i];
    }
    const double rel = std::sqrt(err / norm);
    const double torch_rel = autocast.at("grad_rel_l2").at(name);
    worst = std::max(worst, rel);
    worst_torch = std::max(worst_torch, torch_rel);
    EXPECT_LE(rel, 5e-2) << name;
    EXPECT_LE(rel, 2 * torch_rel + 2e-3) << name << " (torch autocast: " << torch_rel << ")";
  });
  std::printf("[ llama bf16 ] loss %.6f (float64 %.6f, torch autocast %.6f); worst "
              "gradient error %.3g (torch autocast %.3g)\n",
              loss, golden_.loss, autocast.at("loss").get<double>(), worst, worst_torch);
}

TEST_F(LlamaGoldenTest, RecomputingEveryBlockGivesTheSameBits) {
  for (DType dtype : {DType::kFp32, DType::kBf16}) {
    std::vector<float> plain, recomputed;
    const double a = Run(dtype, CheckpointPolicy{}, &plain);
    const double b = Run(dtype, CheckpointPolicy{CheckpointMode::kEveryBlock}, &recomputed);
    EXPECT_EQ(a, b);
    EXPECT_EQ(plain, recomputed) << DTypeName(dtype);
  }
}

// Whole training against torch: the same weights trained by torch's own
// AdamW in FP32 on fixed batches (make_llama_golden.py, llama_train_golden.
// json) and by this model with optim/'s AdamW (torch's arithmetic bit for
// bit, tests/optim): every step's loss within 5e-6 relative.
TEST_F(LlamaGoldenTest, TrainingStepByStepEqualsTorchsAdamW) {
  std::ifstream in("tests/fixtures/llama_train_golden.json");
  ASSERT_TRUE(in) << "cannot read tests/fixtures/llama_train_golden.json";
  const nlohmann::json j = nlohmann::json::parse(in);
  OptimizerConfig o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = j.at("lr");
  o.beta1 = j.at("betas")[0];
  o.beta2 = j.at("betas")[1];
  o.eps = j.at("eps");
  o.weight_decay = j.at("weight_decay");
  absl::StatusOr<std::unique_ptr<UnitModel>> model =
      (*FindArch("llama"))->MakeCpuModel(*layout_, golden_.shape, DType::kFp32,
                                         CheckpointPolicy{});
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> master = flat_, m(flat_.size(), 0.0f), v(flat_.size(), 0.0f);
  std::vector<float> grads(flat_.size());
  double worst = 0;
  uint64_t t = 0;
  for (const nlohmann::json& step : j.at("steps")) {
    const std::vector<int32_t> tokens = step.at("tokens"), targets = step.at("targets");
    std::fill(grads.begin(), grads.end(), 0.0f);
    GptBatch batch{golden_.batch, golden_.seq, tokens, targets};
    absl::StatusOr<GptStepResult> r = GptForwardBackward(**model, *layout_, master.data(),
                                                         batch, 1.0f, absl::MakeSpan(grads));
    ASSERT_TRUE(r.ok()) << r.status();
    const double want = step.at("loss");
    worst = std::max(worst, std::fabs(r->loss - want) / want);
    EXPECT_NEAR(r->loss, want, 5e-6 * want) << "step " << t;
    ++t;
    AdamUpdate(MakeAdamStep(o, t, 1.0f), GradView::Fp32(grads.data()),
               {.master = master.data(), .exp_avg = m.data(), .exp_avg_sq = v.data(),
                .n = master.size()});
  }
  EXPECT_EQ(t, 8u);
  std::printf("[ llama vs torch AdamW, %llu steps ] worst loss error %.3g relative\n",
              static_cast<unsigned long long>(t), worst);
}

// A checkpoint in Hugging Face's names and layout (written by the fixture's
// script, with the rotary buffer older transformers saved) loads into the
// layout as the very weights torch ran, so its first loss is torch's; the
// arch writes the same names back, and a file of another shape is refused.
TEST_F(LlamaGoldenTest, HuggingFaceSafetensorsLoadAsTorchsWeights) {
  absl::StatusOr<const ModelArch*> arch = FindArch("llama");
  ASSERT_TRUE(arch.ok());
  const std::string file = "tests/fixtures/llama_golden.safetensors";
  ASSERT_TRUE((*arch)->CheckHfSafetensors(file, *layout_).ok());
  absl::StatusOr<std::vector<float>> read = (*arch)->ReadHfSafetensors(file, *layout_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, flat_);
  flat_ = *read;
  std::vector<float> grads;
  EXPECT_NEAR(Run(DType::kFp32, CheckpointPolicy{}, &grads), golden_.loss,
              1e-5 * golden_.loss);
  const std::string out = ::testing::TempDir() + "/llama_roundtrip.safetensors";
  ASSERT_TRUE((*arch)->WriteHfSafetensors(out, *layout_, flat_, {}).ok());
  absl::StatusOr<std::vector<float>> back = (*arch)->ReadHfSafetensors(out, *layout_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, flat_);
  ModelShape other = golden_.shape;
  other.mlp_width = 40;
  absl::StatusOr<ModelManifest> m = MakeLlamaManifest(other, 2);
  ASSERT_TRUE(m.ok());
  absl::StatusOr<FlatLayout> wrong = FlatLayout::Create(*m, 1, 2);
  ASSERT_TRUE(wrong.ok());
  // A file missing a tensor, one with a tensor the layout lacks, and (tied
  // embeddings) a head that is not the embedding: each refused naming it.
  std::vector<SafetensorsTensorView> views;
  for (const TensorInfo& ti : layout_->tensors()) {
    views.push_back({ti.name, ti.shape, absl::MakeConstSpan(flat_).subspan(ti.offset, ti.numel)});
  }
  const std::string partial = ::testing::TempDir() + "/llama_partial.safetensors";
  std::vector<SafetensorsTensorView> fewer(views.begin(), views.end() - 1);
  ASSERT_TRUE(WriteSafetensors(partial, fewer).ok());
  absl::Status missing = (*arch)->CheckHfSafetensors(partial, *layout_);
  EXPECT_NE(missing.message().find("'lm_head.weight': is missing"), std::string::npos)
      << missing;
  std::vector<SafetensorsTensorView> more = views;
  more.push_back({"model.layers.0.mlp.extra.weight", {2}, absl::MakeConstSpan(flat_).subspan(0, 2)});
  ASSERT_TRUE(WriteSafetensors(partial, more).ok());
  absl::Status extra = (*arch)->CheckHfSafetensors(partial, *layout_);
  EXPECT_NE(extra.message().find("mlp.extra.weight': is not a tensor"), std::string::npos)
      << extra;
  ModelShape tied_shape = golden_.shape;
  tied_shape.tie_embeddings = true;
  absl::StatusOr<ModelManifest> tm = MakeLlamaManifest(tied_shape, 2);
  ASSERT_TRUE(tm.ok());
  absl::StatusOr<FlatLayout> tied = FlatLayout::Create(*tm, 1, 2);
  ASSERT_TRUE(tied.ok());
  // views' last is lm_head: a head that is not the embedding.
  ASSERT_TRUE(WriteSafetensors(partial, views).ok());
  absl::StatusOr<std::vector<float>> untied = (*arch)->ReadHfSafetensors(partial, *tied);
  ASSERT_FALSE(untied.ok());
  EXPECT_NE(untied.status().message().find("tie_embeddings"), std::string::npos)
      << untied.status();
  absl::Status refused = (*arch)->CheckHfSafetensors(file, *wrong);
  EXPECT_NE(refused.message().find("has shape"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("mlp."), std::string::npos) << refused;
}

// The arch's registry entry: its manifest, count and layout round trip,
// and GPT-2 refuses Llama's keys by name.
TEST_F(LlamaGoldenTest, TheArchitectureKnowsItsShape) {
  absl::StatusOr<const ModelArch*> arch = FindArch("llama");
  ASSERT_TRUE(arch.ok());
  EXPECT_EQ((*arch)->ParamCount(golden_.shape), golden_.params.size());
  absl::StatusOr<ModelShape> back = (*arch)->ShapeOfLayout(*layout_, golden_.shape);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, golden_.shape);
  EXPECT_EQ(back->kv_heads, golden_.shape.kv_heads);
  EXPECT_EQ(back->mlp_width, golden_.shape.mlp_width);
  EXPECT_EQ(back->tie_embeddings, golden_.shape.tie_embeddings);
  ModelShape bad = golden_.shape;
  bad.kv_heads = 3;
  EXPECT_NE((*arch)->Validate(bad).message().find("kv_heads"), std::string::npos);
  bad = golden_.shape;
  bad.heads = 8;
  bad.width = 40;  // head_dim 5: odd
  EXPECT_FALSE((*arch)->Validate(bad).ok());
  ModelShape gpt = ModelShape{};
  gpt.kv_heads = 2;
  absl::StatusOr<const ModelArch*> gpt2 = FindArch("gpt2");
  ASSERT_TRUE(gpt2.ok());
  EXPECT_NE((*gpt2)->Validate(gpt).message().find("zeroshard.model.kv_heads"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard::model
