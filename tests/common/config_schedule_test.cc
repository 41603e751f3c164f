// DeepSpeed's "scheduler" section read into the learning-rate schedule:
// each type and its params, their names in errors (common/config.h).
#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(ConfigTest, SchedulerMapping) {
  auto sched = [](const std::string& s, const std::string& opt = "") {
    return ParseTrainingConfig(
        R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"steps": 100},)" +
        (opt.empty() ? std::string() : opt + ",") + R"("scheduler": )" + s + "}");
  };
  auto cos = sched(R"({"type": "warmupcosinelr", "params": {"total_num_steps": 80,
      "warmup_num_steps": 10, "warmup_type": "linear", "cos_min_ratio": 0.5}})",
                   R"("optimizer": {"type": "AdamW", "params": {"lr": 0.002}})");
  ASSERT_TRUE(cos.ok()) << cos.status();
  EXPECT_EQ(cos->config.optimizer.schedule, LrScheduleKind::kWarmupCosine);
  EXPECT_EQ(cos->config.optimizer.total_steps, 80u);
  EXPECT_EQ(cos->config.optimizer.warmup_steps, 10u);
  EXPECT_DOUBLE_EQ(cos->config.optimizer.min_lr, 0.001);

  auto wlr = sched(R"({"type": "WarmupLR", "params": {"warmup_max_lr": 0.003,
      "warmup_num_steps": 7, "warmup_type": "linear"}})");
  ASSERT_TRUE(wlr.ok()) << wlr.status();
  const OptimizerConfig& o = wlr->config.optimizer;
  EXPECT_EQ(o.lr, 0.003);
  EXPECT_EQ(o.warmup_steps, 7u);
  // Linear warmup then constant: matches DeepSpeed's WarmupLR (linear).
  for (uint64_t t : {1, 3, 7}) EXPECT_NEAR(LearningRateAt(o, t), 0.003 * t / 7, 1e-15);
  for (uint64_t t : {8, 50, 100, 500}) EXPECT_NEAR(LearningRateAt(o, t), 0.003, 1e-15);

  // Hugging Face's non-zero warmup_min_lr, and WarmupCosineLR's
  // warmup_min_ratio: the warmup starts there.
  auto hf = sched(R"({"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-8,
      "warmup_max_lr": 0.003, "warmup_num_steps": 10, "total_num_steps": 50}})");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.optimizer.warmup_type, WarmupType::kLog);
  EXPECT_EQ(hf->config.optimizer.warmup_start_lr, 1e-8);
  EXPECT_EQ(hf->config.optimizer.min_lr, 1e-8);  // and the decay ends there
  auto ratio = sched(R"({"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.1,
      "warmup_num_steps": 10, "warmup_type": "linear"}})",
                     R"("optimizer": {"type": "AdamW", "params": {"lr": 0.002}})");
  ASSERT_TRUE(ratio.ok()) << ratio.status();
  EXPECT_EQ(ratio->config.optimizer.warmup_type, WarmupType::kLinear);
  EXPECT_DOUBLE_EQ(ratio->config.optimizer.warmup_start_lr, 0.0002);
  EXPECT_DOUBLE_EQ(LearningRateAt(ratio->config.optimizer, 5), 0.0002 + 0.0018 * 5 / 10);

  auto flat = sched(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 0}})");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->config.optimizer.schedule, LrScheduleKind::kConstant);

  auto check_err = [&](const std::string& s, const char* needle, const std::string& opt = "") {
    auto r = sched(s, opt);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  check_err(R"({"type": "OneCycle"})", "scheduler.type");
  check_err(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "exp"}})",
            "warmup_type");
  check_err(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.1, "warmup_max_lr": 0.01}})",
            "warmup_min_lr");
  // A warmup longer than a total the file states: a contradiction, both keys named.
  check_err(R"({"type": "WarmupCosineLR", "params": {"warmup_num_steps": 500,
      "warmup_type": "linear", "total_num_steps": 400}})", "total_num_steps");
  check_err(R"({"type": "WarmupDecayLR", "params": {"warmup_num_steps": 50,
      "warmup_type": "linear", "total_num_steps": 40}})", "warmup_num_steps");
  check_err(R"({"type": "WarmupCosineLR", "params": {"warmup_num_steps": 5,
      "warmup_type": "linear", "warmup_min_ratio": 1.5}})", "warmup_min_ratio");
  check_err(R"({"type": "WarmupLR", "params": {"warmup_max_lr": 0.1, "warmup_num_steps": 0}})",
            "disagree", R"("optimizer": {"params": {"lr": 0.01}})");
}

}  // namespace
}  // namespace zeroshard
