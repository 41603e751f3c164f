// Optimizer hyperparameters (torch.optim.AdamW / Adam) and the learning-rate
// schedule, shared by the JSON config, the wire contract and the server.
#ifndef ZEROSHARD_COMMON_OPTIMIZER_CONFIG_H_
#define ZEROSHARD_COMMON_OPTIMIZER_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/enum_names.h"

namespace zeroshard {

// kLion: Chen et al. 2023 (optim/lion.h); beta1 interpolates the update,
// beta2 the momentum, and eps has no effect. kAdamW8bit and kAdam8bit:
// AdamW and Adam with their m and v kept in 8 bits (optim/adam8bit.h;
// bitsandbytes' AdamW8bit and Adam8bit). kRule: a rule of the registry
// (common/optimizer_rules.h), OptimizerConfig::rule its name.
enum class OptimizerKind {
  kAdamW = 0,
  kAdam = 1,
  kLion = 2,
  kAdamW8bit = 3,
  kAdam8bit = 4,
  kRule = 5
};
inline constexpr EnumNames<OptimizerKind, 6> kOptimizerKindNames = {
    {{OptimizerKind::kAdamW, "adamw"},
     {OptimizerKind::kAdam, "adam"},
     {OptimizerKind::kLion, "lion"},
     {OptimizerKind::kAdamW8bit, "adamw8bit"},
     {OptimizerKind::kAdam8bit, "adam8bit"},
     {OptimizerKind::kRule, "rule"}}};

// Whether `kind` keeps 8-bit state (kAdamW8bit, kAdam8bit).
bool IsEightBit(OptimizerKind kind);
// The update's arithmetic: kAdamW for kAdamW8bit, kAdam for kAdam8bit,
// `kind` otherwise (AdamStep::kind; optim/optimizer.h).
OptimizerKind ArithmeticKind(OptimizerKind kind);

// Elements per scale of an 8-bit slot (Dettmers et al. 2022 and
// bitsandbytes: 2048).
inline constexpr uint64_t kQ8SlotBlock = 2048;

// One array of optimizer state that a server keeps per parameter element,
// beside the FP32 master weights and their BF16 mirror. An update rule
// declares its slots (optim/update_rule.h); the store, checkpoint files,
// restore, snapshots, Inspect and the memory estimate read them from here
// instead of naming the arrays.
//
// A slot is FP32 (4 bytes an element) or 8-bit (optim/quant8.h): one code
// byte an element, of the signed (m) or unsigned (v) dynamic map, and one
// FP32 scale (the block's absolute maximum) per kQ8SlotBlock elements,
// the blocks counted from the first element the array holds (a server's
// owned range, a chunk, a checkpoint file's range).
enum class SlotFormat { kFp32 = 0, kQ8Signed = 1, kQ8Unsigned = 2 };
inline constexpr EnumNames<SlotFormat, 3> kSlotFormatNames = {
    {{SlotFormat::kFp32, "fp32"},
     {SlotFormat::kQ8Signed, "q8_signed"},
     {SlotFormat::kQ8Unsigned, "q8_unsigned"}}};

struct StateSlot {
  const char* name;   // e.g. "exp_avg"; unique within a rule
  SlotFormat format;
};
struct OptimizerConfig;

// The scales of n elements of an 8-bit slot: ceil(n / kQ8SlotBlock).
uint64_t Q8Blocks(uint64_t n);
// Bytes that n elements of a slot of `format` take: 4n, or n codes and
// 4 * Q8Blocks(n) scale bytes (codes first, where one array holds both).
uint64_t SlotBytes(SlotFormat format, uint64_t n);
// The same per element, for estimates: 4, or 1 + 4 / kQ8SlotBlock.
double SlotBytesPerElement(SlotFormat format);

// The slots of `kind`'s update rule, in their order in the store and in
// checkpoint files. Adam and AdamW: exp_avg (m), exp_avg_sq (v), FP32;
// Lion: exp_avg, FP32; the 8-bit Adams: exp_avg (signed) and exp_avg_sq
// (unsigned), 8-bit.
// A kRule kind's slots are its registered rule's (`rule`, its name; none
// for a name not registered).
absl::Span<const StateSlot> OptimizerStateSlots(OptimizerKind kind,
                                                absl::string_view rule = "");
absl::Span<const StateSlot> OptimizerStateSlots(const OptimizerConfig& config);
// Sum of the slots' bytes per element (8 for Adam / AdamW, 4 for Lion,
// 2 + 8 / 2048 for the 8-bit Adams).
double OptimizerStateBytesPerElement(OptimizerKind kind,
                                     absl::string_view rule = "");

// The optimizer's name for logs, Inspect and errors: the kind's
// ("adamw"), or a kRule's rule name ("sgd").
std::string OptimizerName(OptimizerKind kind, absl::string_view rule);
std::string OptimizerName(const OptimizerConfig& config);

// kWarmupLinear is DeepSpeed's WarmupDecayLR: warmup, then linear decay to
// min_lr at total_steps.
enum class LrScheduleKind { kConstant = 0, kWarmupCosine = 1, kWarmupLinear = 2 };
inline constexpr EnumNames<LrScheduleKind, 3> kLrScheduleKindNames = {
    {{LrScheduleKind::kConstant, "constant"},
     {LrScheduleKind::kWarmupCosine, "warmup_cosine"},
     {LrScheduleKind::kWarmupLinear, "warmup_linear"}}};

// The warmup's rising function, DeepSpeed's warmup_type: kLinear t / W,
// kLog log(t + 1) / log(max(W, 2)) (DeepSpeed's default, "log").
enum class WarmupType { kLinear = 0, kLog = 1 };
inline constexpr EnumNames<WarmupType, 2> kWarmupTypeNames = {
    {{WarmupType::kLinear, "linear"}, {WarmupType::kLog, "log"}}};

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
  // Warmup shape and the lr it rises from (DeepSpeed's warmup_min_lr, or lr *
  // warmup_min_ratio for WarmupCosineLR). The defaults are zeroshard's
  // schedule before these existed, and what an Init or checkpoint without
  // them means.
  WarmupType warmup_type = WarmupType::kLinear;
  double warmup_start_lr = 0.0;
  // kRule: the registered rule (common/optimizer_rules.h) and its params
  // other than lr, weight_decay and eps (which live above), by torch's
  // keyword; absent ones take the rule's defaults.
  std::string rule;
  std::map<std::string, double> rule_params;

  friend bool operator==(const OptimizerConfig&,
                         const OptimizerConfig&) = default;
};

// Checks ranges: lr > 0 and finite, betas in [0, 1), eps > 0 and finite,
// weight_decay >= 0, schedule fields consistent (warmup_steps <= total_steps,
// 0 <= min_lr <= lr, 0 <= warmup_start_lr <= lr); a kRule config as
// ValidateRuleConfig checks it, and no rule or rule_params on another
// kind. The error names the field.
absl::Status ValidateOptimizerConfig(const OptimizerConfig& config);

// Learning rate at Adam step t (1-based) under the config's schedule:
// constant lr, or a warmup from s = warmup_start_lr, s + (lr - s) * gamma(t),
// with W = warmup_steps and
//   kLinear: gamma = t / W for t <= W (no warmup when W is 0),
//   kLog:    gamma = log(t + 1) / log(W') for t < W' = max(W, 2),
// then cosine from lr down to min_lr at total_steps, min_lr afterwards
// (kWarmupCosine), or linearly min_lr + (lr - min_lr) * (total_steps - t) /
// (total_steps - W) down to min_lr at total_steps, min_lr afterwards
// (kWarmupLinear; W' for a log warmup).
//
// Step indexing: the value at t is the one DeepSpeed's WarmupLR /
// WarmupDecayLR get_lr() returns at last_batch_iteration = t (the
// scheduler after t step() calls), for both warmup types. DeepSpeed's
// engine steps its scheduler after each optimizer step, so its own first
// steps use warmup_min_lr; zeroshard's step 1 already takes gamma(1). A
// linear warmup of W < 2 steps is taken as given (DeepSpeed raises it to
// 2). Example: lr 1e-3, W 10, kLog, start 0: t = 1 -> 3.0103e-4, t = 9 ->
// 1e-3.
double LearningRateAt(const OptimizerConfig& config, uint64_t t);

// One parameter group's hyper-parameters for one step (GroupSetting in
// proto/zeroshard/v1/shard.proto), given by a client that owns them step
// by step (torch's param_groups) in place of the schedule.
struct StepSetting {
  double lr = 0;
  double weight_decay = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;

  friend bool operator==(const StepSetting&, const StepSetting&) = default;
};

// INVALID_ARGUMENT naming group `index` unless lr and weight_decay are
// finite and >= 0, the betas in [0, 1) and eps finite and > 0.
absl::Status ValidateStepSetting(const StepSetting& setting, size_t index);

// `base` with the setting's lr, betas and eps, its schedule constant (so
// LearningRateAt gives setting.lr at every t); the weight decay travels
// apart (the rules take it per group).
OptimizerConfig WithStepSetting(OptimizerConfig base,
                                const StepSetting& setting);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIMIZER_CONFIG_H_
