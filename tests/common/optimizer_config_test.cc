#include "common/optimizer_config.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

void ExpectBad(const OptimizerConfig& c, const std::string& field) {
  const absl::Status s = ValidateOptimizerConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
}

TEST(OptimizerConfigTest, DefaultsAreTorchAdamW) {
  const OptimizerConfig c;
  EXPECT_TRUE(ValidateOptimizerConfig(c).ok());
  EXPECT_EQ(c.kind, OptimizerKind::kAdamW);
  EXPECT_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.beta1, 0.9);
  EXPECT_EQ(c.beta2, 0.999);
  EXPECT_EQ(c.eps, 1e-8);
  EXPECT_EQ(c.weight_decay, 0.01);
}

TEST(OptimizerConfigTest, ValidationNamesTheField) {
  OptimizerConfig c;
  c.lr = 0;
  ExpectBad(c, "lr");
  c.lr = NAN;
  ExpectBad(c, "lr");
  c = {};
  c.beta1 = 1.0;
  ExpectBad(c, "beta1");
  c = {};
  c.beta2 = -0.1;
  ExpectBad(c, "beta2");
  c = {};
  c.eps = 0;
  ExpectBad(c, "eps");
  c = {};
  c.weight_decay = -1;
  ExpectBad(c, "weight_decay");
  c = {};
  c.schedule = LrScheduleKind::kWarmupCosine;
  ExpectBad(c, "total_steps");
  c.total_steps = 10;
  c.warmup_steps = 11;
  ExpectBad(c, "warmup_steps");
  c.warmup_steps = 2;
  c.min_lr = 1.0;
  ExpectBad(c, "min_lr");
  c.min_lr = 1e-5;
  EXPECT_TRUE(ValidateOptimizerConfig(c).ok());
}

TEST(OptimizerConfigTest, LearningRateSchedule) {
  OptimizerConfig c;
  c.lr = 0.01;
  for (uint64_t t : {1, 5, 1000}) EXPECT_EQ(LearningRateAt(c, t), 0.01);
  c.schedule = LrScheduleKind::kWarmupCosine;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr = 0.001;
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 1), 0.001);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 5), 0.005);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 10), 0.01);
  EXPECT_NEAR(LearningRateAt(c, 11), 0.01, 1e-5);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 60), (0.01 + 0.001) / 2);  // halfway
  EXPECT_NEAR(LearningRateAt(c, 85), 0.001 + 0.009 * 0.5 * (1 + std::cos(M_PI * 0.75)), 1e-15);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 110), 0.001);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 500), 0.001);
  // Monotone non-increasing after warmup.
  for (uint64_t t = 11; t < 120; ++t) EXPECT_LE(LearningRateAt(c, t + 1), LearningRateAt(c, t));
  // No warmup: cosine from the first step.
  c.warmup_steps = 0;
  EXPECT_LT(LearningRateAt(c, 1), 0.01);
  EXPECT_GT(LearningRateAt(c, 1), 0.0099);
}

// DeepSpeed's WarmupDecayLR: linear warmup, then linear decay to 0 at
// total_steps; min_lr must be 0.
TEST(OptimizerConfigTest, WarmupLinearSchedule) {
  OptimizerConfig c;
  c.lr = 0.01;
  c.schedule = LrScheduleKind::kWarmupLinear;
  c.warmup_steps = 10;
  c.total_steps = 110;
  ASSERT_TRUE(ValidateOptimizerConfig(c).ok());
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 5), 0.005);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 10), 0.01);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 60), 0.005);  // halfway down
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 109), 0.0001);
  EXPECT_EQ(LearningRateAt(c, 110), 0);
  EXPECT_EQ(LearningRateAt(c, 500), 0);
  c.min_lr = 0.001;
  EXPECT_FALSE(ValidateOptimizerConfig(c).ok());
  c.min_lr = 0;
  c.total_steps = 0;
  EXPECT_FALSE(ValidateOptimizerConfig(c).ok());
}

}  // namespace
}  // namespace zeroshard
