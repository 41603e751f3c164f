// A step's own hyper-parameters and out-of-band state writes on a shard,
// below the RPC layer: the group settings a push carries
// (PushGradHeader.group_settings) replace the schedule and the groups'
// settings bit for bit, and are refused unless one per group and not for a
// group with a tensor rule; a state slot or step count written by SetWeights
// is refused before anything changes.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/layout.h"
#include "common/param_groups.h"
#include "gtest/gtest.h"
#include "server/model_shard.h"
#include "server/param_group_table.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace step_settings_test {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}


// ---- A step's own group settings (PushGradHeader.group_settings).

// One server over SmallManifest(1), two groups over its first 128 and next
// 128 elements, the optimizer `o`, weights from `w`.
std::unique_ptr<ModelShard> SettingsShard(const v1::OptimizerConfig& o,
                                          const std::vector<float>& w) {
  v1::InitRequest init = testing::MakeInit(testing::SmallManifest(1), 1, 0,
                                           /*seed=*/1, /*chunk=*/64);
  *init.mutable_optimizer() = o;
  absl::StatusOr<std::unique_ptr<ModelShard>> shard =
      ModelShard::Create(init, {0, 1}, Placement::kHost);
  EXPECT_TRUE(shard.ok()) << shard.status();
  const FlatRange own = (*shard)->owned();
  if (own.size() > w.size()) {
    ADD_FAILURE() << "the test's weights are shorter than the owned range";
    return nullptr;
  }
  std::vector<float> mine(w.begin(), w.begin() + own.size());
  std::vector<float> zero(own.size(), 0.0f);
  EXPECT_TRUE(
      (*shard)->RestoreState(0, 0, mine.data(), {zero.data(), zero.data()}).ok());
  return *std::move(shard);
}

TEST(StepSettingsTest, ReplaceTheScheduleAndTheGroupsSettingsBitForBit) {
  // Powers of two, so that the reference's lr * lr_scale is exactly each
  // group's lr.
  v1::OptimizerConfig base;
  base.set_lr(1e-3);
  base.set_beta1(0.9);
  base.set_beta2(0.999);
  base.set_eps(1e-8);
  base.set_weight_decay(0.01);
  base.mutable_schedule()->set_kind(v1::LrSchedule::WARMUP_COSINE);
  base.mutable_schedule()->set_warmup_steps(10);
  base.mutable_schedule()->set_total_steps(100);
  AddParamGroups({ResolvedGroup{"g0", 0.01, 1.0, {{0, 128}}, 128},
                  ResolvedGroup{"g1", 0.0, 1.0, {{128, 256}}, 128}},
                 &base);
  // The reference: the same step as a constant schedule and groups.
  v1::OptimizerConfig ref;
  ref.set_lr(0.5);
  ref.set_beta1(0.8);
  ref.set_beta2(0.95);
  ref.set_eps(1e-6);
  ref.set_weight_decay(0.01);
  AddParamGroups({ResolvedGroup{"g0", 0.25, 0.5, {{0, 128}}, 128},
                  ResolvedGroup{"g1", 0.125, 0.25, {{128, 256}}, 128}},
                 &ref);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  // More than SmallManifest(1)'s flat space (every element read).
  std::vector<float> w(1 << 16), g(1 << 16);
  for (float& x : w) x = normal(rng);
  for (float& x : g) x = normal(rng);
  std::unique_ptr<ModelShard> a = SettingsShard(base, w);
  std::unique_ptr<ModelShard> b = SettingsShard(ref, w);
  const FlatRange own = a->owned();
  const std::vector<GradPiece> pieces = {{own, DType::kFp32, g.data()}};
  StepParams stepped{0.5, false,
                     {{0.25, 0.25, 0.8, 0.95, 1e-6}, {0.125, 0.125, 0.8, 0.95, 1e-6}}};
  ASSERT_TRUE(a->ApplyPush(0, stepped, pieces).ok());
  ASSERT_TRUE(b->ApplyPush(0, {0.5, false}, pieces).ok());
  const testing::ShardState sa = testing::ReadState(*a);
  const testing::ShardState sb = testing::ReadState(*b);
  // The groups' elements (the rest, in no group, keep the optimizer's own
  // settings, which differ between the two on purpose).
  for (size_t k = 0; k < 3; ++k) {
    const std::vector<float> ga(sa.arrays[k].begin(), sa.arrays[k].begin() + 256);
    const std::vector<float> gb(sb.arrays[k].begin(), sb.arrays[k].begin() + 256);
    ASSERT_EQ(DiffBits(ga, gb, "array"), "") << k;
  }
  // Without settings the schedule applies (warmup: lr 1e-4 at t 1): the
  // settings did change the step.
  std::unique_ptr<ModelShard> c = SettingsShard(base, w);
  ASSERT_TRUE(c->ApplyPush(0, {0.5, false}, pieces).ok());
  EXPECT_NE(DiffBits(testing::ReadState(*c).arrays[0], sa.arrays[0], "m"), "");
}

TEST(StepSettingsTest, RefusedUnlessOnePerGroupAndNotWithTensorRules) {
  v1::OptimizerConfig o;
  o.set_lr(1e-3);
  o.set_beta1(0.9);
  o.set_beta2(0.999);
  o.set_eps(1e-8);
  AddParamGroups({ResolvedGroup{"g0", 0.0, 1.0, {{0, 128}}, 128}}, &o);
  std::vector<float> w(1 << 16, 0.5f), g(1 << 16, 0.25f);
  std::unique_ptr<ModelShard> a = SettingsShard(o, w);
  const std::vector<GradPiece> pieces = {{a->owned(), DType::kFp32, g.data()}};
  absl::StatusOr<ApplyResult> r = a->ApplyPush(
      0, {1.0, false, {{1e-3, 0, 0.9, 0.999, 1e-8}, {1e-3, 0, 0.9, 0.999, 1e-8}}},
      pieces);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("2 group_settings for the optimizer's 1"),
            std::string::npos)
      << r.status();
  // Nothing was applied: the step is still to be made.
  EXPECT_TRUE(a->ApplyPush(0, {1.0, false, {{1e-3, 0, 0.9, 0.999, 1e-8}}},
                           pieces).ok());
  EXPECT_FALSE(ValidateStepSetting({std::nan(""), 0, 0.9, 0.99, 1e-8}, 0).ok());
  EXPECT_FALSE(ValidateStepSetting({1e-3, 0, 1.0, 0.99, 1e-8}, 0).ok());
  EXPECT_FALSE(ValidateStepSetting({1e-3, 0, 0.9, 0.99, 0.0}, 0).ok());
  EXPECT_TRUE(ValidateStepSetting({0.0, 0, 0.0, 0.0, 1e-8}, 0).ok());
}

// SetWeights' state writes below the RPC layer: a slot by name (an unknown
// one and an 8-bit one refused before anything is written), the step count
// refused while a step is partly applied, leaving every array and count as
// they were, and accepted once the step is whole.
TEST(StateWriteTest, SlotsAndStepCountsAreRefusedBeforeAnyChange) {
  v1::OptimizerConfig o;
  o.set_lr(1e-3);
  o.set_beta1(0.9);
  o.set_beta2(0.999);
  o.set_eps(1e-8);
  std::vector<float> w(1 << 16, 0.5f), g(1 << 16, 0.25f);
  std::unique_ptr<ModelShard> a = SettingsShard(o, w);
  ASSERT_NE(a, nullptr);
  absl::StatusOr<size_t> slot = a->StateSlotIndex("exp_avg_sq");
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_EQ(*slot, 1u);
  absl::StatusOr<size_t> bad = a->StateSlotIndex("momentum_buffer");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("\"exp_avg\", \"exp_avg_sq\""),
            std::string::npos) << bad.status();
  // Part of step 0 applied (the first half of the first chunk).
  const FlatRange half{0, 32};
  ASSERT_TRUE(a->ApplyPush(0, {1.0, false}, {{half, DType::kFp32, g.data()}})
                  .ok());
  const testing::ShardState before = testing::ReadState(*a);
  const absl::Status partly = a->SetAdamSteps(7);
  EXPECT_EQ(partly.code(), absl::StatusCode::kFailedPrecondition) << partly;
  EXPECT_TRUE(testing::ReadState(*a) == before);
  // The rest of the step, then the count is taken.
  ASSERT_TRUE(a->ApplyPush(0, {1.0, false},
                           {{FlatRange{32, a->owned().end}, DType::kFp32,
                             g.data() + 32}}).ok());
  ASSERT_TRUE(a->SetAdamSteps(7).ok());
  EXPECT_EQ(a->versions().min_adam_step, 7u);

  // An 8-bit rule's slots are written whole by a restore only.
  v1::InitRequest init = testing::MakeInit(testing::SmallManifest(1), 1, 0,
                                           /*seed=*/1, /*chunk=*/4096);
  init.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAMW_8BIT);
  absl::StatusOr<std::unique_ptr<ModelShard>> q8 =
      ModelShard::Create(init, {0, 1}, Placement::kHost);
  ASSERT_TRUE(q8.ok()) << q8.status();
  absl::StatusOr<size_t> q8_slot = (*q8)->StateSlotIndex("exp_avg");
  EXPECT_EQ(q8_slot.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(q8_slot.status().message().find("8 bits"), std::string::npos)
      << q8_slot.status();
}

}  // namespace
}  // namespace step_settings_test
}  // namespace zeroshard
