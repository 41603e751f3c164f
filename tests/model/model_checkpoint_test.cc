// Activation checkpointing gives bit-identical losses and gradients to
// keeping everything (recompute is deterministic), holds less memory, and
// the unit API rejects misuse with clear errors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "model/gpt_manifest.h"
#include "common/init_values.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "model/gpt.h"
#include "model/gpt_forward_backward.h"

namespace zeroshard::model {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shape_ = {.layers = 5, .heads = 2, .width = 32, .vocab = 64, .context = 16};
    auto layout = FlatLayout::Create(*MakeGptManifest(shape_, 1), 1, 1);
    ASSERT_TRUE(layout.ok());
    layout_.emplace(*layout);
    params_.resize(layout_->total_elems());
    seed_ = zeroshard::testing::TestSeed();
    trace_.emplace(__FILE__, __LINE__, zeroshard::testing::SeedTrace(seed_));
    FillInitialValues(*layout_, seed_, 0.2,
                      {0, layout_->total_elems()}, params_.data());
    bf16_.resize(params_.size());
    FloatToBf16Array(params_.data(), bf16_.data(), params_.size());
    std::mt19937 rng(static_cast<uint32_t>(seed_ >> 7));
    std::uniform_int_distribution<int32_t> tok(0, shape_.vocab - 1);
    for (int i = 0; i < kB * kT; ++i) {
      tokens_.push_back(tok(rng));
      targets_.push_back(tok(rng));
    }
  }

  const void* Params(DType dt) const {
    return dt == DType::kBf16 ? static_cast<const void*>(bf16_.data()) : params_.data();
  }

  GptStepResult Run(DType dt, CheckpointPolicy policy, std::vector<float>* grads) {
    grads->assign(layout_->total_elems(), 0.0f);
    auto r = GptForwardBackward(*layout_, shape_, Params(dt), dt,
                                {kB, kT, tokens_, targets_}, policy, 1.0f,
                                absl::MakeSpan(*grads));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : GptStepResult{};
  }

  UnitParams Unit(DType dt, int u) const {
    const UnitInfo& info = layout_->units()[u];
    return {static_cast<const char*>(Params(dt)) + info.offset * DTypeSize(dt),
            info.padded, dt};
  }

  static constexpr int kB = 2, kT = 12;
  GptShape shape_;
  std::optional<FlatLayout> layout_;
  std::vector<float> params_;
  std::vector<uint16_t> bf16_;
  std::vector<int32_t> tokens_, targets_;
  uint64_t seed_ = 0;
  std::optional<::testing::ScopedTrace> trace_;  // the seed, on failures
};

TEST_F(CheckpointTest, PoliciesAreBitIdenticalToNone) {
  for (DType dt : {DType::kBf16, DType::kFp32}) {
    std::vector<float> want, got;
    const GptStepResult none = Run(dt, {CheckpointMode::kNone}, &want);
    for (CheckpointPolicy p : {CheckpointPolicy{CheckpointMode::kEveryBlock},
                               CheckpointPolicy{CheckpointMode::kEveryK, 2},
                               CheckpointPolicy{CheckpointMode::kEveryK, 3},
                               CheckpointPolicy{CheckpointMode::kEveryK, 5},
                               CheckpointPolicy{CheckpointMode::kEveryK, 7}}) {
      const GptStepResult r = Run(dt, p, &got);
      EXPECT_EQ(r.loss, none.loss) << p.Name() << " " << DTypeName(dt);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << p.Name() << " " << DTypeName(dt) << ": gradients differ from none";
      if (p.mode == CheckpointMode::kEveryBlock || p.k <= 3) {
        EXPECT_LT(r.peak_activation_bytes, none.peak_activation_bytes) << p.Name();
      }
    }
  }
}

TEST_F(CheckpointTest, GradientsAccumulateAcrossCalls) {
  std::vector<float> once, twice(layout_->total_elems(), 0.0f);
  Run(DType::kBf16, {}, &once);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(GptForwardBackward(*layout_, shape_, Params(DType::kBf16), DType::kBf16,
                                   {kB, kT, tokens_, targets_}, {}, 1.0f,
                                   absl::MakeSpan(twice)).ok());
  }
  // Within one call several contributions already sum (tied wte, bias rows),
  // so the second call's rounding differs slightly (cancellation can make an
  // element small): 1e-5 of the largest gradient.
  float scale = 0;
  for (float g : once) scale = std::max(scale, std::fabs(g));
  ASSERT_GT(scale, 0.0f);
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(twice[i], 2.0f * once[i], 1e-5f * scale) << i;
  }
}

TEST_F(CheckpointTest, UnitApiRejectsMisuse) {
  const DType dt = DType::kBf16;
  auto model = GptModel::Create(*layout_, shape_, dt, {CheckpointMode::kEveryBlock});
  ASSERT_TRUE(model.ok());
  GptModel& m = *model;
  EXPECT_EQ(m.BlockForward(0, Unit(dt, 1)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Begin(kB, 17, tokens_, targets_).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad = tokens_;
  bad[5] = shape_.vocab;
  EXPECT_EQ(m.Begin(kB, kT, bad, targets_).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Begin(kB, kT, tokens_, targets_).ok());
  EXPECT_EQ(m.EmbeddingForward(Unit(DType::kFp32, 0)).code(),
            absl::StatusCode::kInvalidArgument);  // wrong dtype
  UnitParams shorter = Unit(dt, 0);
  shorter.length = layout_->units()[0].numel - 1;
  EXPECT_EQ(m.EmbeddingForward(shorter).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.EmbeddingForward(Unit(dt, 0)).ok());
  EXPECT_EQ(m.BlockForward(1, Unit(dt, 2)).code(), absl::StatusCode::kFailedPrecondition);
  for (int l = 0; l < shape_.layers; ++l) ASSERT_TRUE(m.BlockForward(l, Unit(dt, l + 1)).ok());
  std::vector<float> grads(layout_->total_elems(), 0.0f);
  auto grad = [&](int u) {
    return absl::MakeSpan(grads).subspan(layout_->units()[u].offset, layout_->units()[u].padded);
  };
  const int fin = m.final_unit();
  ASSERT_TRUE(m.FinalForwardBackward(Unit(dt, fin), Unit(dt, 0), 1.0f, grad(fin), grad(0)).ok());
  const int last = shape_.layers - 1;
  ASSERT_TRUE(m.NeedsRecompute(last));
  EXPECT_EQ(m.BlockBackward(last, Unit(dt, last + 1), grad(last + 1)).code(),
            absl::StatusCode::kFailedPrecondition);  // internals not recomputed
  ASSERT_EQ(m.RecomputeStart(last), last);
  ASSERT_TRUE(m.RecomputeBlock(last, Unit(dt, last + 1)).ok());
  EXPECT_EQ(m.BlockBackward(last, Unit(dt, last + 1), grad(last + 1).subspan(0, 10)).code(),
            absl::StatusCode::kInvalidArgument);  // gradient buffer too short
  ASSERT_TRUE(m.BlockBackward(last, Unit(dt, last + 1), grad(last + 1)).ok());
  EXPECT_EQ(m.EmbeddingBackward(grad(0)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CheckpointTest, RejectsLayoutOfAnotherShape) {
  GptShape other = shape_;
  other.width = 64;
  EXPECT_EQ(GptModel::Create(*layout_, other, DType::kBf16, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GptModel::Create(*layout_, shape_, DType::kBf16, {CheckpointMode::kEveryK, 0})
                .status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, EveryKHoldsSegmentInputsOnly) {
  // With every_k(2) on 5 blocks, backward of block 3 recomputes from block 2.
  const DType dt = DType::kFp32;
  auto model = GptModel::Create(*layout_, shape_, dt, {CheckpointMode::kEveryK, 2});
  ASSERT_TRUE(model.ok());
  GptModel& m = *model;
  ASSERT_TRUE(m.Begin(kB, kT, tokens_, targets_).ok());
  ASSERT_TRUE(m.EmbeddingForward(Unit(dt, 0)).ok());
  for (int l = 0; l < shape_.layers; ++l) ASSERT_TRUE(m.BlockForward(l, Unit(dt, l + 1)).ok());
  std::vector<float> grads(layout_->total_elems(), 0.0f);
  auto grad = [&](int u) {
    return absl::MakeSpan(grads).subspan(layout_->units()[u].offset, layout_->units()[u].padded);
  };
  const int fin = m.final_unit();
  ASSERT_TRUE(m.FinalForwardBackward(Unit(dt, fin), Unit(dt, 0), 1.0f, grad(fin), grad(0)).ok());
  EXPECT_EQ(m.RecomputeStart(4), 4);
  ASSERT_TRUE(m.RecomputeBlock(4, Unit(dt, 5)).ok());
  ASSERT_TRUE(m.BlockBackward(4, Unit(dt, 5), grad(5)).ok());
  EXPECT_EQ(m.RecomputeStart(3), 2);
  EXPECT_EQ(m.RecomputeBlock(3, Unit(dt, 4)).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace zeroshard::model
