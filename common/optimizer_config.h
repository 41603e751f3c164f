// Optimizer hyperparameters (torch.optim.AdamW / Adam) and the learning-rate
// schedule, shared by the JSON config, the wire contract and the server.
#ifndef ZEROSHARD_COMMON_OPTIMIZER_CONFIG_H_
#define ZEROSHARD_COMMON_OPTIMIZER_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard {

enum class OptimizerKind { kAdamW = 0, kAdam = 1 };

// kWarmupLinear is DeepSpeed's WarmupDecayLR: linear warmup, then linear
// decay to 0 at total_steps.
enum class LrScheduleKind { kConstant = 0, kWarmupCosine = 1, kWarmupLinear = 2 };

// Hyperparameters, fixed for a run. Defaults are torch.optim.AdamW's.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  LrScheduleKind schedule = LrScheduleKind::kConstant;
  uint64_t warmup_steps = 0;
  uint64_t total_steps = 0;
  double min_lr = 0.0;

  friend bool operator==(const OptimizerConfig&,
                         const OptimizerConfig&) = default;
};

// Checks ranges: lr > 0 and finite, betas in [0, 1), eps > 0 and finite,
// weight_decay >= 0, schedule fields consistent (warmup_steps <= total_steps,
// 0 <= min_lr <= lr). The error names the field.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// Learning rate at Adam step t (1-based) under the config's schedule:
// constant lr, or linear warmup lr * t / warmup_steps for t <= warmup_steps,
// then cosine from lr down to min_lr at total_steps, min_lr afterwards
// (kWarmupCosine), or linearly lr * (total_steps - t) / (total_steps -
// warmup_steps) down to 0 at total_steps, 0 afterwards (kWarmupLinear;
// min_lr must be 0).
double LearningRateAt(const OptimizerConfig& config, uint64_t t);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIMIZER_CONFIG_H_
