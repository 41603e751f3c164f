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
#include "common/layout.h"
#include "common/optimizer_rules.h"

namespace zeroshard {

// "matrices", "embeddings", "biases", "norms".
absl::string_view TensorClassName(TensorClass c);
// The class TensorClassName names `name`, or nullopt.
std::optional<TensorClass> TensorClassFromName(absl::string_view name);

struct GroupSettings {
  // true: the optimizer's weight_decay; false: `weight_decay`.
  bool optimizer_weight_decay = true;
  double weight_decay = 0;
  double lr_scale = 1;
  // "optimizer": {"type": "Muon" | "Adafactor", "params": {...}}: the
  // group's tensors are updated whole by this rule of the registry
  // (common/optimizer_rules.h; Muon: only the class "matrices").
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
// class's "optimizer" is {"type": T, "params": {...}} with T a rule for
// whole tensors of the registry (Muon, only for "matrices"; Adafactor) and
// its params (ParseTensorRule), without the class's own weight_decay or
// lr_scale (the rule's params hold them).
absl::StatusOr<ParamGroups> ParseParamGroups(absl::string_view json_text);

// A whole-tensor rule `name` from the JSON object of its "params" (`key`
// names it in errors): each param by its keyword as its entry describes
// it (null: its default), an unknown one refused naming the ones it takes.
absl::StatusOr<TensorRule> ParseTensorRule(absl::string_view name,
                                           absl::string_view params_json,
                                           absl::string_view key);

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
