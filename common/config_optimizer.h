// The "optimizer" section of a DeepSpeed-style config, for ParseTrainingConfig
// (common/config_json.cc): which rule the servers run and its params, and
// the rules a type gives tensor classes (Adafactor every class, DeepSpeed's
// Muon the matrices), applied once the rest of the config is read.
//
//   config_internal::ClassRules rules;
//   ASSIGN_OR_RETURN(bool lr_given, ParseOptimizer(root, &c.optimizer, &rules));
//   ...  // zeroshard.param_groups and the scheduler
//   ApplyClassRules(rules, doc, &c, &warnings);
#ifndef ZEROSHARD_COMMON_CONFIG_OPTIMIZER_H_
#define ZEROSHARD_COMMON_CONFIG_OPTIMIZER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "common/config_section.h"
#include "common/param_groups.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace config_internal {

// The rules optimizer.type gives tensor classes rather than the
// element-wise optimizer: Adafactor every class's, Muon the matrices'.
struct ClassRules {
  std::optional<TensorRule> every_class;  // "Adafactor"
  std::optional<TensorRule> matrices;     // DeepSpeed's "Muon"
};

// Reads "optimizer" into `o` and `rules`; returns whether its lr was given
// (the schedule's peak). The types are matched by name.
absl::StatusOr<bool> ParseOptimizer(Section& root, OptimizerConfig* o,
                                    ClassRules* rules);

// Gives the classes the rules of `rules` (a class's own rule, from
// zeroshard.param_groups, kept); warns where a scheduler beside Adafactor's
// relative step has no effect.
void ApplyClassRules(const ClassRules& rules, const nlohmann::json& doc,
                     TrainingConfig* c, std::vector<std::string>* warnings);

}  // namespace config_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CONFIG_OPTIMIZER_H_
