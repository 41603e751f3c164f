#include "common/optimizer_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/optimizer_rules.h"
#include "common/status_macros.h"

namespace zeroshard {

bool IsEightBit(OptimizerKind kind) {
  if (kind == OptimizerKind::kRule) return false;
  for (const StateSlot& s : RuleOfKind(kind).slots) {
    if (s.format != SlotFormat::kFp32) return true;
  }
  return false;
}

OptimizerKind ArithmeticKind(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW8bit:
      return OptimizerKind::kAdamW;
    case OptimizerKind::kAdam8bit:
      return OptimizerKind::kAdam;
    default:
      return kind;
  }
}

uint64_t Q8Blocks(uint64_t n) {
  return n / kQ8SlotBlock + (n % kQ8SlotBlock != 0 ? 1 : 0);
}

uint64_t SlotBytes(SlotFormat format, uint64_t n) {
  return format == SlotFormat::kFp32 ? 4 * n : n + 4 * Q8Blocks(n);
}

double SlotBytesPerElement(SlotFormat format) {
  return format == SlotFormat::kFp32 ? 4.0 : 1.0 + 4.0 / kQ8SlotBlock;
}

absl::Span<const StateSlot> OptimizerStateSlots(OptimizerKind kind,
                                                absl::string_view rule) {
  if (kind != OptimizerKind::kRule) return RuleOfKind(kind).slots;
  const RuleInfo* r = FindRule(rule);
  if (r == nullptr || r->kind != OptimizerKind::kRule) return {};
  return r->slots;
}

absl::Span<const StateSlot> OptimizerStateSlots(const OptimizerConfig& c) {
  return OptimizerStateSlots(c.kind, c.rule);
}

double OptimizerStateBytesPerElement(OptimizerKind kind,
                                     absl::string_view rule) {
  double bytes = 0;
  for (const StateSlot& s : OptimizerStateSlots(kind, rule)) {
    bytes += SlotBytesPerElement(s.format);
  }
  return bytes;
}

std::string OptimizerName(OptimizerKind kind, absl::string_view rule) {
  if (kind == OptimizerKind::kRule) return std::string(rule);
  return RuleOfKind(kind).name;
}

std::string OptimizerName(const OptimizerConfig& c) {
  return OptimizerName(c.kind, c.rule);
}

absl::Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  auto bad = [](const char* field, double value, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", field, " = ", value, ": ", want));
  };
  if (!(c.lr > 0) || !std::isfinite(c.lr)) return bad("lr", c.lr, "must be > 0 and finite");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) return bad("beta1", c.beta1, "must be in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) return bad("beta2", c.beta2, "must be in [0, 1)");
  if (!(c.eps > 0) || !std::isfinite(c.eps)) return bad("eps", c.eps, "must be > 0 and finite");
  if (!(c.weight_decay >= 0) || !std::isfinite(c.weight_decay)) {
    return bad("weight_decay", c.weight_decay, "must be >= 0 and finite");
  }
  if (c.kind == OptimizerKind::kRule) {
    RETURN_IF_ERROR(ValidateRuleConfig(c));
  } else if (!c.rule.empty() || !c.rule_params.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.rule \"", c.rule, "\" and its params belong to kind "
        "\"rule\", not \"", NameOf(kOptimizerKindNames, c.kind), "\""));
  } else if (RuleOfKind(c.kind).kind != c.kind) {
    return absl::InvalidArgumentError("optimizer.type: unknown kind");
  }
  if (c.schedule == LrScheduleKind::kWarmupCosine ||
      c.schedule == LrScheduleKind::kWarmupLinear) {
    if (c.total_steps == 0) {
      return absl::InvalidArgumentError(
          "optimizer.total_steps must be > 0 for the warmup_cosine and warmup_linear schedules");
    }
    if (c.warmup_steps > c.total_steps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.warmup_steps (", c.warmup_steps,
          ") must be <= total_steps (", c.total_steps, ")"));
    }
    if (!(c.min_lr >= 0 && c.min_lr <= c.lr)) {
      return bad("min_lr", c.min_lr, "must be in [0, lr]");
    }
    if (!(c.warmup_start_lr >= 0 && c.warmup_start_lr <= c.lr)) {
      return bad("warmup_start_lr", c.warmup_start_lr, "must be in [0, lr]");
    }
    if (c.warmup_type != WarmupType::kLinear && c.warmup_type != WarmupType::kLog) {
      return absl::InvalidArgumentError("optimizer.warmup_type: unknown kind");
    }
  } else if (c.schedule != LrScheduleKind::kConstant) {
    return absl::InvalidArgumentError("optimizer schedule: unknown kind");
  }
  return absl::OkStatus();
}

double LearningRateAt(const OptimizerConfig& c, uint64_t t) {
  if (c.schedule == LrScheduleKind::kConstant) return c.lr;
  const double start = c.warmup_start_lr;
  uint64_t warmup = c.warmup_steps;
  if (c.warmup_type == WarmupType::kLog) {
    warmup = std::max<uint64_t>(warmup, 2);  // log(1) = 0, as DeepSpeed
    if (t < warmup) {
      const double gamma = (1.0 / std::log(static_cast<double>(warmup))) *
                           std::log(static_cast<double>(t + 1));
      return start + (c.lr - start) * gamma;
    }
  } else if (warmup > 0 && t <= warmup) {
    // With start 0 this is bit for bit lr * t / W.
    return start + (c.lr - start) * static_cast<double>(t) / static_cast<double>(warmup);
  }
  if (t >= c.total_steps) return c.min_lr;
  const double span = static_cast<double>(c.total_steps - warmup);
  if (c.schedule == LrScheduleKind::kWarmupLinear) {
    return c.min_lr + (c.lr - c.min_lr) * static_cast<double>(c.total_steps - t) / span;
  }
  const double progress = static_cast<double>(t - warmup) / span;
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

absl::Status ValidateStepSetting(const StepSetting& s, size_t index) {
  const auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("group setting ", index, ": ", what, " (lr ", s.lr,
                     ", weight_decay ", s.weight_decay, ", betas (", s.beta1,
                     ", ", s.beta2, "), eps ", s.eps, ")"));
  };
  if (!std::isfinite(s.lr) || s.lr < 0) return bad("lr must be finite and >= 0");
  if (!std::isfinite(s.weight_decay) || s.weight_decay < 0) {
    return bad("weight_decay must be finite and >= 0");
  }
  if (!(s.beta1 >= 0 && s.beta1 < 1) || !(s.beta2 >= 0 && s.beta2 < 1)) {
    return bad("betas must be in [0, 1)");
  }
  if (!std::isfinite(s.eps) || !(s.eps > 0)) return bad("eps must be finite and > 0");
  return absl::OkStatus();
}

OptimizerConfig WithStepSetting(OptimizerConfig base, const StepSetting& s) {
  base.lr = s.lr;
  base.beta1 = s.beta1;
  base.beta2 = s.beta2;
  base.eps = s.eps;
  base.weight_decay = s.weight_decay;
  base.schedule = LrScheduleKind::kConstant;
  return base;
}

}  // namespace zeroshard
