// Parameter groups: weight decay and a learning-rate scale per tensor class
// (matrices, embeddings, biases, norms), as Hugging Face's Trainer and
// nanoGPT build their optimizer groups.
//
// The default is theirs: matrices and embeddings decay with the optimizer's
// weight_decay, biases and LayerNorm weights do not decay, every class at
// lr_scale 1. "single" is torch's one group: the optimizer's weight_decay on
// every tensor (zeroshard's behaviour before groups existed).
//
// Config (the value of "zeroshard.param_groups"):
//   "single" | "default" | {"biases": {"weight_decay": 0.0, "lr_scale": 1.0},
//                           "norms": {...}, "matrices": {...}, "embeddings": {...}}
// Absent classes and keys keep the default.
//
// The servers get the groups as flat ranges (ResolveParamGroups); a range's
// learning rate at Adam step t is LearningRateAt(optimizer, t) * lr_scale.
//
//   ASSIGN_OR_RETURN(ParamGroups g, ParseParamGroups(R"({"norms": {"lr_scale": 2}})"));
//   for (const ResolvedGroup& r : ResolveParamGroups(layout, g, /*wd=*/0.1)) ...
#ifndef ZEROSHARD_COMMON_PARAM_GROUPS_H_
#define ZEROSHARD_COMMON_PARAM_GROUPS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/adafactor_options.h"
#include "common/enum_names.h"
#include "common/layout.h"

namespace zeroshard {

// "matrices", "embeddings", "biases", "norms".
absl::string_view TensorClassName(TensorClass c);
// The class TensorClassName names `name`, or nullopt.
std::optional<TensorClass> TensorClassFromName(absl::string_view name);

// A rule that updates each whole tensor of a group in place of the
// optimizer's element-wise one (docs/DESIGN.md, "Rules for whole tensors"),
// keeping its state in the element-wise rule's slots.
//   kMuon: Muon (optim/muon.h) on 2-D matrices with lr, momentum, nesterov,
//     weight_decay and bf16_products; its lr follows the optimizer's
//     schedule (lr_t / lr times `lr`); momentum in the first slot.
//   kAdafactor: Adafactor (optim/adafactor.h) on 1-D and 2-D tensors with
//     `adafactor` (lr and weight_decay its own; without relative_step its lr
//     follows the schedule as Muon's); the first moment (beta1) in the first
//     slot, the second moment in the second (a matrix: its row statistics,
//     then its column statistics).
enum class TensorRuleKind { kNone = 0, kMuon = 1, kAdafactor = 2 };
inline constexpr EnumNames<TensorRuleKind, 3> kTensorRuleKindNames = {
    {{TensorRuleKind::kNone, "none"},
     {TensorRuleKind::kMuon, "muon"},
     {TensorRuleKind::kAdafactor, "adafactor"}}};
struct TensorRule {
  TensorRuleKind kind = TensorRuleKind::kNone;
  // Muon's.
  double lr = 0.02;
  double momentum = 0.95;
  bool nesterov = true;
  double weight_decay = 0;
  // The Newton–Schulz iteration in BF16 (optim/newton_schulz.h kBf16, the
  // published code's arithmetic on a GPU) instead of FP32.
  bool bf16_products = false;
  // Adafactor's.
  AdafactorOptions adafactor;
  bool active() const { return kind != TensorRuleKind::kNone; }
  // The decoupled weight decay the rule applies.
  double decay() const {
    return kind == TensorRuleKind::kAdafactor ? adafactor.weight_decay
                                              : weight_decay;
  }
  friend bool operator==(const TensorRule&, const TensorRule&) = default;
};

struct GroupSettings {
  // true: the optimizer's weight_decay; false: `weight_decay`.
  bool optimizer_weight_decay = true;
  double weight_decay = 0;
  double lr_scale = 1;
  // "optimizer": {"type": "Muon" | "Adafactor", "params": {...}}: the
  // group's tensors are updated whole by this rule (Muon: only the class
  // "matrices").
  TensorRule rule;
  friend bool operator==(const GroupSettings&, const GroupSettings&) = default;
};

struct ParamGroups {
  // torch's single group: `classes` is not used.
  bool single = false;
  // Indexed by TensorClass; the Hugging Face / nanoGPT default.
  std::array<GroupSettings, kNumTensorClasses> classes = {
      GroupSettings{}, GroupSettings{}, GroupSettings{false, 0.0, 1.0},
      GroupSettings{false, 0.0, 1.0}};

  static ParamGroups Single() { return ParamGroups{.single = true}; }
  friend bool operator==(const ParamGroups&, const ParamGroups&) = default;
};

// Parses the JSON value of "zeroshard.param_groups". Errors name the key
// (e.g. zeroshard.param_groups.norms.lr_scale); weight_decay and lr_scale
// must be finite and in [0, 1e6]; unknown classes or keys are errors. A
// class's "optimizer" is {"type": "Muon", "params": {"lr", "momentum",
// "nesterov", "weight_decay", "ns_precision"}} (Muon's published defaults
// 0.02, 0.95, true, 0; "fp32" or "bf16", default "fp32"), only for
// "matrices", or {"type": "Adafactor", "params": {...}} (ParseAdafactorParams)
// for any class; either without the class's own weight_decay or lr_scale
// (the rule's params hold them).
absl::StatusOr<ParamGroups> ParseParamGroups(absl::string_view json_text);

// Adafactor's "params" object, Hugging Face's names over its defaults (lr,
// eps [eps1, eps2], clip_threshold, decay_rate, beta1, weight_decay,
// scale_parameter, relative_step, warmup_init; null for lr or beta1: none),
// checked as ValidateAdafactorOptions; errors name `key` and the param.
absl::StatusOr<AdafactorOptions> ParseAdafactorParams(
    absl::string_view json_text, absl::string_view key);

// "single", or one "class: weight_decay W, lr_scale L" clause per class
// (with the optimizer's weight_decay filled in), for logs and the CLI.
std::string DescribeParamGroups(const ParamGroups& groups,
                                double optimizer_weight_decay);

// One group as the servers get it.
struct ResolvedGroup {
  std::string name;  // the class name
  double weight_decay = 0;
  double lr_scale = 1;
  // Flat ranges of the class's tensors, in order, adjacent ones merged.
  std::vector<FlatRange> ranges;
  uint64_t elems = 0;  // sum of the ranges' sizes
  TensorRule rule;     // active: the ranges are whole tensors
};

// OK, or INVALID_ARGUMENT naming `what` and the hyperparameter: Muon's lr >
// 0, momentum in [0, 1), weight_decay >= 0, each finite and <= 1e6;
// Adafactor's as ValidateAdafactorOptions.
absl::Status ValidateTensorRule(const TensorRule& rule, absl::string_view what);

// Gives `rule` to every class that has none (optimizer.type "Adafactor":
// the rule for the whole model, a class's own rule kept); the groups are
// then per class, not "single".
void GiveUnruledClasses(const TensorRule& rule, ParamGroups* groups);

// Marks every tensor of a class whose group has a tensor rule keep_whole,
// so that no server boundary cuts it (common/layout.h). Call on the
// manifest before FlatLayout::Create wherever a run's layout is made.
void MarkWholeTensors(const ParamGroups& groups, ModelManifest* manifest);

// The groups for a layout: one per class that has tensors, in TensorClass
// order. Empty for "single" (the servers then apply the optimizer's
// weight_decay and lr to every element). Padding belongs to no group.
std::vector<ResolvedGroup> ResolveParamGroups(const FlatLayout& layout,
                                              const ParamGroups& groups,
                                              double optimizer_weight_decay);

// A piece of the flat space with one setting.
struct GroupSpan {
  FlatRange range;
  double weight_decay = 0;
  double lr_scale = 1;
  TensorRule rule;
};

// [0, total_elems) cut where the setting changes, in order: the groups'
// ranges with theirs, the rest with the optimizer's weight_decay and lr
// scale 1 (what a server applies; for in-process baselines).
std::vector<GroupSpan> GroupSpans(const std::vector<ResolvedGroup>& groups,
                                  uint64_t total_elems,
                                  double optimizer_weight_decay);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_PARAM_GROUPS_H_
