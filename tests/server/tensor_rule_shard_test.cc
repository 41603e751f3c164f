// Rules for whole tensors on a shard (docs/DESIGN.md, "Rules for whole
// tensors"), below the RPC layer: a parameter group's Muon or Adafactor rule
// applied by ModelShards to pushes cut anywhere, each tensor updated whole
// and compared bit for bit with the rule's own function (optim/muon.h,
// optim/adafactor.h) on a copy, the state where the servers keep it; and
// the Inits that must be refused.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/layout.h"
#include "common/param_groups.h"
#include "gtest/gtest.h"
#include "optim/adafactor.h"
#include "optim/muon.h"
#include "optim/newton_schulz.h"
#include "server/model_shard.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

uint32_t FloatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct RuleShards {
  FlatLayout layout;
  std::vector<std::unique_ptr<ModelShard>> shards;
  ParamGroups groups;
};

// SmallManifest(2) with `groups_json` (zeroshard.param_groups), AdamW
// (`kind`) lr 1e-3 with weight decay 0.05 elsewhere, over `servers` servers
// with chunks of 64; `manifest` overrides SmallManifest(2).
absl::StatusOr<RuleShards> MakeRuleShards(
    const char* groups_json, uint32_t servers, bool mark_whole,
    OptimizerKind kind = OptimizerKind::kAdamW,
    const v1::ModelManifest* manifest = nullptr) {
  absl::StatusOr<ParamGroups> g = ParseParamGroups(groups_json);
  if (!g.ok()) return g.status();
  ModelManifest m = FromProto(manifest != nullptr ? *manifest
                                                  : testing::SmallManifest(2));
  if (mark_whole) MarkWholeTensors(*g, &m);
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(m, servers, 1);
  if (!layout.ok()) return layout.status();
  RuleShards out{*layout, {}, *g};
  for (uint32_t k = 0; k < servers; ++k) {
    v1::InitRequest init =
        testing::MakeInit(ToProto(m), servers, k, /*seed=*/5, /*chunk=*/64);
    OptimizerConfig o;
    o.kind = kind;
    o.weight_decay = 0.05;
    *init.mutable_optimizer() = ToProto(o);
    AddParamGroups(ResolveParamGroups(*layout, *g, o.weight_decay),
                   init.mutable_optimizer());
    absl::StatusOr<std::unique_ptr<ModelShard>> shard =
        ModelShard::Create(init, {k, servers}, Placement::kHost);
    if (!shard.ok()) return shard.status();
    out.shards.push_back(*std::move(shard));
  }
  return out;
}

// One gradient for the owned range as `dtype`, cut at random points
// (inside tensors and across chunks): the pieces and their bytes.
struct Push {
  std::shared_ptr<std::vector<char>> bytes;
  std::vector<GradPiece> pieces;
  std::vector<float> At(uint64_t offset, uint64_t n, FlatRange own,
                        DType dtype) const {
    std::vector<float> g(n);
    for (uint64_t i = 0; i < n; ++i) {
      const char* src = bytes->data() + (offset - own.begin + i) * DTypeSize(dtype);
      if (dtype == DType::kFp32) {
        std::memcpy(&g[i], src, 4);
      } else {
        uint16_t b;
        std::memcpy(&b, src, 2);
        g[i] = Bf16ToFloat(b);
      }
    }
    return g;
  }
};
Push RandomPush(std::mt19937_64& rng, FlatRange own, DType dtype) {
  Push p{testing::RandomBytes(rng, own, dtype), {}};
  for (const FlatRange& r : testing::RandomTiling(rng, own, 9)) {
    p.pieces.push_back(
        {r, dtype, p.bytes->data() + (r.begin - own.begin) * DTypeSize(dtype)});
  }
  return p;
}

TEST(TensorRuleShardTest, MuonUpdatesEachMatrixWholeFromPiecesOfAnySize) {
  absl::StatusOr<RuleShards> ms = MakeRuleShards(
      R"({"matrices": {"optimizer": {"type": "Muon",
          "params": {"lr": 0.02, "weight_decay": 0.1}}}})",
      2, /*mark_whole=*/true);
  ASSERT_TRUE(ms.ok()) << ms.status();
  const TensorRule rule = ms->groups.classes[0].rule;
  std::mt19937_64 rng(17);
  int matrices = 0;
  for (size_t k = 0; k < ms->shards.size(); ++k) {
    ModelShard& shard = *ms->shards[k];
    const FlatRange own = shard.owned();
    const testing::ShardState before = testing::ReadState(shard);
    // FP32 for server 0, BF16 for server 1.
    const DType dtype = k == 0 ? DType::kFp32 : DType::kBf16;
    const Push push = RandomPush(rng, own, dtype);
    // A push holding part of a matrix is refused, naming it; nothing moves.
    const TensorInfo* cut = nullptr;
    for (const TensorInfo& t : ms->layout.tensors()) {
      if (t.param_class == TensorClass::kMatrix && own.Contains(t.range())) {
        cut = &t;
        break;
      }
    }
    ASSERT_NE(cut, nullptr);
    const GradPiece half{{cut->offset, cut->offset + cut->numel / 2}, dtype,
                         push.bytes->data() + (cut->offset - own.begin) * DTypeSize(dtype)};
    absl::StatusOr<ApplyResult> refused = shard.ApplyPush(0, {0.5, false}, {&half, 1});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find(cut->name), std::string::npos)
        << refused.status();
    EXPECT_EQ(testing::Diff(testing::ReadState(shard), before), "");

    absl::StatusOr<ApplyResult> r = shard.ApplyPush(0, {0.5, false}, push.pieces);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->applied_elems, own.size());
    const testing::ShardState after = testing::ReadState(shard);
    // Each matrix: MuonUpdate on the whole of it, momentum in exp_avg, v
    // untouched; every other tensor moved by AdamW (v > 0).
    NewtonSchulzScratch scratch;
    const MuonStep step =
        MakeMuonStep(rule.Param("lr"), rule.Param("momentum"), rule.Param("weight_decay"),
                     rule.Param("nesterov") != 0, 0.5f);
    for (const TensorInfo& t : ms->layout.tensors()) {
      if (!own.Contains(t.range())) continue;
      const size_t at = t.offset - own.begin;
      if (t.param_class != TensorClass::kMatrix) {
        EXPECT_GT(after.arrays[2][at], 0.0f) << t.name;
        continue;
      }
      ++matrices;
      std::vector<float> w(before.arrays[0].begin() + at,
                           before.arrays[0].begin() + at + t.numel);
      std::vector<float> m(t.numel, 0.0f);
      const std::vector<float> g = push.At(t.offset, t.numel, own, dtype);
      ASSERT_TRUE(MuonUpdate(step, GradView::Fp32(g.data()), t.shape[0],
                             t.shape[1], w.data(), m.data(), nullptr, scratch)
                      .ok());
      for (uint64_t i = 0; i < t.numel; ++i) {
        ASSERT_EQ(FloatBits(after.arrays[0][at + i]), FloatBits(w[i])) << t.name << " " << i;
        ASSERT_EQ(FloatBits(after.arrays[1][at + i]), FloatBits(m[i])) << t.name << " " << i;
        ASSERT_EQ(after.arrays[2][at + i], 0.0f) << t.name << " " << i;
      }
    }
  }
  EXPECT_GE(matrices, 4);
}

// Adafactor with a first moment and a fixed lr on the matrices, Hugging
// Face's defaults (relative step, no first moment) on the norms; AdamW on
// the embeddings and biases. Three steps with a loss-scale coefficient, on
// two servers (FP32 and BF16 gradients): every Adafactor tensor equals
// AdafactorUpdate on a copy bit for bit, its first moment in exp_avg, its
// second moment in exp_avg_sq (rows, then columns); a perturbed beta1 or
// clip_threshold is told apart.
TEST(TensorRuleShardTest, AdafactorUpdatesEachTensorWholeWithItsStateInTheSlots) {
  absl::StatusOr<RuleShards> as = MakeRuleShards(
      R"({"matrices": {"optimizer": {"type": "Adafactor", "params": {
            "lr": 0.01, "relative_step": false, "beta1": 0.9,
            "weight_decay": 0.1, "scale_parameter": false}}},
          "norms": {"optimizer": {"type": "Adafactor"}}})",
      2, /*mark_whole=*/true);
  ASSERT_TRUE(as.ok()) << as.status();
  const AdafactorOptions on_matrices = AdafactorOptionsOf(as->groups.classes[0].rule);
  const AdafactorOptions on_norms = AdafactorOptionsOf(as->groups.classes[3].rule);
  ASSERT_EQ(on_matrices.beta1, 0.9);
  ASSERT_TRUE(on_norms.relative_step);
  std::mt19937_64 rng(29);
  int factored = 0, vectors = 0;
  for (size_t k = 0; k < as->shards.size(); ++k) {
    ModelShard& shard = *as->shards[k];
    const FlatRange own = shard.owned();
    const DType dtype = k == 0 ? DType::kFp32 : DType::kBf16;
    testing::ShardState want = testing::ReadState(shard);
    std::vector<float> perturbed = want.arrays[0];
    for (uint64_t step = 0; step < 3; ++step) {
      const Push push = RandomPush(rng, own, dtype);
      const float coefficient = step == 1 ? 0.25f : 1.0f;
      absl::StatusOr<ApplyResult> r =
          shard.ApplyPush(step, {coefficient, false}, push.pieces);
      ASSERT_TRUE(r.ok()) << r.status();
      for (const TensorInfo& t : as->layout.tensors()) {
        if (!own.Contains(t.range())) continue;
        const bool matrix = t.param_class == TensorClass::kMatrix;
        if (!matrix && t.param_class != TensorClass::kNorm) continue;
        const size_t at = t.offset - own.begin;
        const int64_t rows = matrix ? t.shape[0] : static_cast<int64_t>(t.numel);
        const std::vector<float> g = push.At(t.offset, t.numel, own, dtype);
        const AdafactorOptions& o = matrix ? on_matrices : on_norms;
        float* second = want.arrays[2].data() + at;
        ASSERT_TRUE(AdafactorUpdate(
                        o, step + 1, coefficient, GradView::Fp32(g.data()),
                        {rows, matrix ? t.shape[1] : 0},
                        {.master = want.arrays[0].data() + at,
                         .row = second,
                         .col = second + rows,
                         .exp_avg_sq = second,
                         .exp_avg = want.arrays[1].data() + at})
                        .ok());
        // The negative control: beta1 0.8 on the matrices, clip_threshold
        // 0.5 on the norms, from the same start.
        AdafactorOptions off = o;
        if (matrix) {
          off.beta1 = 0.8;
        } else {
          off.clip_threshold = 0.5;
        }
        std::vector<float> m(t.numel, 0.0f), v(t.numel, 0.0f);
        if (step == 0) {
          ASSERT_TRUE(AdafactorUpdate(
                          off, 1, coefficient, GradView::Fp32(g.data()),
                          {rows, matrix ? t.shape[1] : 0},
                          {.master = perturbed.data() + at,
                           .row = v.data(),
                           .col = v.data() + rows,
                           .exp_avg_sq = v.data(),
                           .exp_avg = m.data()})
                          .ok());
        }
      }
      const testing::ShardState got = testing::ReadState(shard);
      for (const TensorInfo& t : as->layout.tensors()) {
        if (!own.Contains(t.range())) continue;
        const bool matrix = t.param_class == TensorClass::kMatrix;
        if (!matrix && t.param_class != TensorClass::kNorm) continue;
        if (step == 0) (matrix ? factored : vectors) += 1;
        const size_t at = t.offset - own.begin;
        for (int a = 0; a < 3; ++a) {
          for (uint64_t i = 0; i < t.numel; ++i) {
            ASSERT_EQ(FloatBits(got.arrays[a][at + i]), FloatBits(want.arrays[a][at + i]))
                << t.name << " " << testing::kArrayNames[a] << "[" << i
                << "] after step " << step + 1;
          }
        }
        if (step == 0) {
          bool told_apart = false;
          for (uint64_t i = 0; i < t.numel && !told_apart; ++i) {
            told_apart = FloatBits(got.arrays[0][at + i]) != FloatBits(perturbed[at + i]);
          }
          EXPECT_TRUE(told_apart) << t.name;
        }
      }
      // Everything else (AdamW's tensors) follows the shard's own state.
      want = got;
    }
  }
  EXPECT_GE(factored, 4);
  EXPECT_GE(vectors, 3);
}

// A convolution's kernel (4-D) in the matrices' Muon group: updated whole
// as (out, in * kh * kw) with the published scale's kh / kw (MuonStep::
// aspect), bit for bit MuonUpdate on a copy; its bias by AdamW.
TEST(TensorRuleShardTest, MuonTakesAConvolutionKernelFlattened) {
  ModelManifest m;
  UnitSpec unit{"conv", {}};
  unit.tensors.push_back(TensorSpec{"conv.weight", {8, 3, 3, 2}, {}, TensorClass::kMatrix});
  unit.tensors.push_back(TensorSpec{"conv.bias", {8}, {}, TensorClass::kBias});
  m.units = {unit};
  m.partition_count = 1;
  const v1::ModelManifest manifest = ToProto(m);
  absl::StatusOr<RuleShards> ms = MakeRuleShards(
      R"({"matrices": {"optimizer": {"type": "Muon", "params": {"lr": 0.05}}}})",
      1, /*mark_whole=*/true, OptimizerKind::kAdamW, &manifest);
  ASSERT_TRUE(ms.ok()) << ms.status();
  ModelShard& shard = *ms->shards[0];
  const FlatRange own = shard.owned();
  const testing::ShardState before = testing::ReadState(shard);
  std::mt19937_64 rng(23);
  const Push push = RandomPush(rng, own, DType::kFp32);
  ASSERT_TRUE(shard.ApplyPush(0, {1.0, false}, push.pieces).ok());
  const testing::ShardState after = testing::ReadState(shard);
  const TensorRule rule = ms->groups.classes[0].rule;
  MuonStep step = MakeMuonStep(rule.Param("lr"), rule.Param("momentum"),
                               rule.Param("weight_decay"), rule.Param("nesterov") != 0, 1.0f);
  step.aspect = 3.0 / 2.0;
  const TensorInfo& t = ms->layout.tensors()[0];
  std::vector<float> w(before.arrays[0].begin(), before.arrays[0].begin() + t.numel);
  std::vector<float> mom(t.numel, 0.0f);
  const std::vector<float> g = push.At(t.offset, t.numel, own, DType::kFp32);
  NewtonSchulzScratch scratch;
  ASSERT_TRUE(MuonUpdate(step, GradView::Fp32(g.data()), 8, 18, w.data(),
                         mom.data(), nullptr, scratch).ok());
  for (uint64_t i = 0; i < t.numel; ++i) {
    ASSERT_EQ(FloatBits(after.arrays[0][i]), FloatBits(w[i])) << i;
    ASSERT_EQ(FloatBits(after.arrays[1][i]), FloatBits(mom[i])) << i;
  }
  // The flattened matrix's own scale (8 / 18 -> 1) would differ.
  step.aspect = 0;
  std::vector<float> w2(before.arrays[0].begin(), before.arrays[0].begin() + t.numel);
  std::vector<float> mom2(t.numel, 0.0f);
  ASSERT_TRUE(MuonUpdate(step, GradView::Fp32(g.data()), 8, 18, w2.data(),
                         mom2.data(), nullptr, scratch).ok());
  EXPECT_NE(w2, w);
}

TEST(TensorRuleShardTest, InitRefusesMatricesCutByAServerOrNotTwoD) {
  // Without keep_whole, some server count cuts a matrix: the server
  // holding its first part refuses Init, naming it.
  bool refused = false;
  for (uint32_t servers = 2; servers <= 7 && !refused; ++servers) {
    absl::StatusOr<RuleShards> ms = MakeRuleShards(
        R"({"matrices": {"optimizer": {"type": "Muon"}}})", servers,
        /*mark_whole=*/false);
    if (ms.ok()) continue;
    refused = true;
    EXPECT_EQ(ms.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(ms.status().message().find("straddles"), std::string::npos)
        << ms.status();
    EXPECT_NE(ms.status().message().find("keep_whole"), std::string::npos);
  }
  EXPECT_TRUE(refused);
  // A hostile Init: the rule over a bias (1-D) range.
  v1::InitRequest init =
      testing::MakeInit(testing::SmallManifest(1), 1, 0, /*seed=*/1, /*chunk=*/0);
  *init.mutable_optimizer() = ToProto(OptimizerConfig{});
  const ModelManifest m = FromProto(testing::SmallManifest(1));
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(m, 1, 1);
  ASSERT_TRUE(layout.ok());
  for (const TensorInfo& t : layout->tensors()) {
    if (t.param_class != TensorClass::kBias) continue;
    v1::ParamGroup* g = init.mutable_optimizer()->add_param_groups();
    g->set_name("biases");
    g->mutable_tensor_rule()->set_kind(v1::TensorRule::MUON);
    g->mutable_tensor_rule()->set_lr(0.02);
    g->mutable_tensor_rule()->set_momentum(0.95);
    g->add_ranges()->set_offset(t.offset);
    g->mutable_ranges(0)->set_length(t.numel);
    break;
  }
  absl::StatusOr<std::unique_ptr<ModelShard>> shard =
      ModelShard::Create(init, {0, 1}, Placement::kHost);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("Muon updates matrices"),
            std::string::npos)
      << shard.status();
  // An unknown rule kind, and a bad momentum.
  init.mutable_optimizer()->mutable_param_groups(0)->mutable_tensor_rule()->set_kind(
      static_cast<v1::TensorRule::Kind>(7));
  shard = ModelShard::Create(init, {0, 1}, Placement::kHost);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("kind 7"), std::string::npos)
      << shard.status();
}

TEST(TensorRuleShardTest, InitRefusesAdafactorWhereItsStateHasNoRoom) {
  const char* everywhere =
      R"({"matrices": {"optimizer": {"type": "Adafactor"}},
          "embeddings": {"optimizer": {"type": "Adafactor"}},
          "biases": {"optimizer": {"type": "Adafactor"}},
          "norms": {"optimizer": {"type": "Adafactor"}}})";
  // Every class, over AdamW's two slots, on three servers: fine (the
  // embeddings kept whole too).
  absl::StatusOr<RuleShards> ok = MakeRuleShards(everywhere, 3, true);
  ASSERT_TRUE(ok.ok()) << ok.status();
  // Lion keeps one slot: Adafactor's second moment has none.
  absl::StatusOr<RuleShards> lion =
      MakeRuleShards(everywhere, 1, true, OptimizerKind::kLion);
  ASSERT_FALSE(lion.ok());
  EXPECT_NE(lion.status().message().find("needs 2, the optimizer's rule has 1"),
            std::string::npos)
      << lion.status();
  // A 1 x 64 matrix: 65 row and column values in 64 elements; a 4 x 1 x 16
  // one: 4 slices of 17.
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1, 64}, std::vector<int64_t>{4, 1, 16}}) {
    v1::ModelManifest m = testing::SmallManifest(2);
    v1::TensorSpec* t = m.mutable_units(1)->add_tensors();
    t->set_name("odd.weight");
    for (int64_t d : shape) t->add_shape(d);
    t->mutable_init()->set_kind(v1::InitRule::NORMAL);
    t->mutable_init()->set_std_divisor(1.0);
    t->set_param_class(v1::MATRIX);
    absl::StatusOr<RuleShards> odd =
        MakeRuleShards(everywhere, 1, true, OptimizerKind::kAdamW, &m);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("odd.weight"), std::string::npos)
        << odd.status();
    EXPECT_NE(odd.status().message().find("do not fit"), std::string::npos)
        << odd.status();
  }
}

}  // namespace
}  // namespace zeroshard
