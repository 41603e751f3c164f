#include "common/optimizer_config.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "common/config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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

// DeepSpeed's WarmupDecayLR: linear warmup, then linear decay to min_lr at
// total_steps.
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
  c.min_lr = 0.001;  // the decay ends at warmup_min_lr
  ASSERT_TRUE(ValidateOptimizerConfig(c).ok());
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 60), 0.0055);
  EXPECT_EQ(LearningRateAt(c, 110), 0.001);
  c.min_lr = 0.02;
  ExpectBad(c, "min_lr");
  c.min_lr = 0;
  c.total_steps = 0;
  EXPECT_FALSE(ValidateOptimizerConfig(c).ok());
}

// The warmup fields: start in [0, lr]; a linear warmup from 0 is bit for bit
// the schedule before they existed (lr * t / W), so old checkpoints and the
// torch goldens keep their values.
TEST(OptimizerConfigTest, WarmupStartAndType) {
  OptimizerConfig c;
  c.lr = 0.01;
  c.schedule = LrScheduleKind::kWarmupCosine;
  c.warmup_steps = 7;
  c.total_steps = 100;
  c.warmup_start_lr = 0.02;
  ExpectBad(c, "warmup_start_lr");
  c.warmup_start_lr = -1e-9;
  ExpectBad(c, "warmup_start_lr");
  c.warmup_start_lr = 0;
  c.warmup_type = static_cast<WarmupType>(7);
  ExpectBad(c, "warmup_type");
  c.warmup_type = WarmupType::kLinear;
  ASSERT_TRUE(ValidateOptimizerConfig(c).ok());
  for (uint64_t t = 1; t <= 7; ++t) {
    const double before = c.lr * static_cast<double>(t) / 7.0;
    const double now = LearningRateAt(c, t);
    EXPECT_EQ(std::memcmp(&before, &now, sizeof now), 0) << t;
  }
  // Linear from 0.001: 0.001 + 0.009 * t / 7.
  c.warmup_start_lr = 0.001;
  EXPECT_NEAR(LearningRateAt(c, 1), 0.001 + 0.009 / 7, 1e-18);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 7), 0.01);
  // Log: log(t + 1) / log(7), reaching lr at t = 6.
  c.warmup_type = WarmupType::kLog;
  c.warmup_start_lr = 0;
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 1), 0.01 * std::log(2.0) / std::log(7.0));
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 3), 0.01 * std::log(4.0) / std::log(7.0));
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 6), 0.01);
  for (uint64_t t = 1; t < 6; ++t) EXPECT_LT(LearningRateAt(c, t), LearningRateAt(c, t + 1));
  // A log warmup of 0 or 1 steps is DeepSpeed's 2: lr from step 1 on.
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 1), 0.01);
}

// Golden rates from DeepSpeed's three warmup schedulers
// (tests/fixtures/make_deepspeed_lr_golden.py, deepspeed_lr_golden.json):
// each case's scheduler block is parsed as a config file's, and zeroshard's
// Adam step t must take DeepSpeed's get_lr() at last_batch_iteration = t,
// to within rounding (a few ulps: the operations are grouped differently).
TEST(OptimizerConfigTest, MatchesDeepSpeedWarmupGoldens) {
  std::ifstream in("tests/fixtures/deepspeed_lr_golden.json");
  ASSERT_TRUE(in.good()) << "tests/fixtures/deepspeed_lr_golden.json not found; tests run "
                            "from the repository root";
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_GE(golden.at("cases").size(), 7u);
  for (const nlohmann::json& k : golden.at("cases")) {
    SCOPED_TRACE(k.at("name").get<std::string>());
    nlohmann::json file = {
        {"train_micro_batch_size_per_gpu", 1},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", k.at("lr")}}}}},
        {"scheduler", k.at("scheduler")},
        {"zeroshard", {{"steps", k.at("steps")}}}};
    absl::StatusOr<ParsedConfig> parsed = ParseTrainingConfig(file.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const OptimizerConfig& o = parsed->config.optimizer;
    const nlohmann::json& params = k.at("scheduler").at("params");
    EXPECT_EQ(o.warmup_type, params.value("warmup_type", "log") == "log" ? WarmupType::kLog
                                                                       : WarmupType::kLinear);
    for (const nlohmann::json& pair : k.at("lrs")) {
      const uint64_t t = pair.at(0).get<uint64_t>();
      const double want = pair.at(1).get<double>();
      EXPECT_NEAR(LearningRateAt(o, t), want,
                  4 * std::numeric_limits<double>::epsilon() * want)
          << "t = " << t;
    }
  }
}

}  // namespace
}  // namespace zeroshard
