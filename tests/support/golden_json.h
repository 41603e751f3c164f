// Reading the optimizer golden fixtures (tests/fixtures/make_*_golden.py):
// FP32 values stored as their IEEE bit patterns, and the optimizer config of
// one case (lr, betas, eps where the rule has one, weight decay, schedule).
#ifndef ZEROSHARD_TESTS_SUPPORT_GOLDEN_JSON_H_
#define ZEROSHARD_TESTS_SUPPORT_GOLDEN_JSON_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/optimizer_config.h"
#include "nlohmann/json.hpp"

namespace zeroshard::testing {

inline std::vector<float> GoldenFloats(const nlohmann::json& bits) {
  std::vector<float> out;
  out.reserve(bits.size());
  for (const auto& b : bits) out.push_back(BitsToFloat(b.get<uint32_t>()));
  return out;
}

// `kind` for Lion; Adam and AdamW take the case's "kind" ("adamw" or
// "adam") and its eps.
inline OptimizerConfig GoldenOptimizerConfig(const nlohmann::json& c,
                                             OptimizerKind kind) {
  OptimizerConfig config;
  config.kind = kind;
  if (kind != OptimizerKind::kLion) {
    config.kind = c.at("kind") == "adamw" ? OptimizerKind::kAdamW
                                          : OptimizerKind::kAdam;
    config.eps = c.at("eps");
  }
  config.lr = c.at("lr");
  config.beta1 = c.at("beta1");
  config.beta2 = c.at("beta2");
  config.weight_decay = c.at("weight_decay");
  if (c.at("schedule") == "warmup_cosine") {
    config.schedule = LrScheduleKind::kWarmupCosine;
    config.warmup_steps = c.at("warmup_steps");
    config.total_steps = c.at("total_steps");
    config.min_lr = c.at("min_lr");
  }
  return config;
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_GOLDEN_JSON_H_
