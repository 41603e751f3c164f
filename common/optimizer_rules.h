// The registry of optimizer rules described by data (docs/DESIGN.md,
// "Optimizer rules"): each entry says what the config parser, the wire
// conversion, validation, the memory estimate, Inspect and the PyTorch
// front-end need to know about a rule, so that none of them names it. Its
// update lives in optim/ (optim/update_rule.cc's table finds it by name).
//
// A rule is OptimizerKind::kRule with OptimizerConfig::rule its name here.
// Its params are torch's keywords: "lr", "weight_decay" and "eps" live in
// OptimizerConfig's own fields (so schedules, parameter groups and the
// front-end's per-step settings drive them as they drive AdamW's); every
// other param in OptimizerConfig::rule_params, by name. A bool param is
// 0 or 1 there.
//
// Adding a rule: an entry in optimizer_rules.cc's table and its update in
// optim/ (a file, and a line in optim/update_rule.cc's table).
//
//   const RuleInfo* r = FindRuleByType("SGD");    // or FindRule("sgd")
//   for (const RuleParam& p : r->params) ... p.name, p.default_value ...
#ifndef ZEROSHARD_COMMON_OPTIMIZER_RULES_H_
#define ZEROSHARD_COMMON_OPTIMIZER_RULES_H_

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/optimizer_config.h"

namespace zeroshard {

struct RuleParam {
  enum class Kind { kNumber, kBool };
  std::string name;  // torch's keyword, e.g. "momentum"
  Kind kind = Kind::kNumber;
  // The default; NaN when the config must give it (torch's `required`).
  double default_value = 0;
  // A number's inclusive range.
  double min = 0;
  double max = 1e6;
  // True when it lives in OptimizerConfig's field of that name ("lr",
  // "weight_decay", "eps") rather than in rule_params.
  bool common_field() const {
    return name == "lr" || name == "weight_decay" || name == "eps";
  }
};

// A keyword the rule accepts only at one value (torch's maximize: false),
// with the reason a different value is refused.
struct FixedParam {
  std::string name;
  double value = 0;  // a bool: 0 or 1
  std::string why;
};

struct RuleInfo {
  // The registry's name ("sgd"): OptimizerConfig::rule, the wire, the
  // resolved config, logs.
  std::string name;
  // The config's "optimizer.type" spellings (DeepSpeed's, case aside).
  std::vector<std::string> types;
  // The torch class the front-end maps to this rule ("SGD": torch.optim.SGD).
  std::string torch_class;
  std::string description;  // one line, for --help and errors
  std::vector<RuleParam> params;
  std::vector<FixedParam> fixed;
  // Keywords accepted with no effect (torch's foreach, differentiable).
  std::vector<std::string> no_effect;
  // The state kept per element, in the store's order.
  std::vector<StateSlot> slots;
  // A condition over the params torch checks (SGD's nesterov needs
  // momentum > 0 and dampening 0); OK when none.
  absl::Status (*check)(const OptimizerConfig& config) = nullptr;

  const RuleParam* FindParam(absl::string_view param) const;
};

// Every rule of the registry, in the table's order.
const std::vector<RuleInfo>& RegisteredRules();

// The rule named `name`, or null.
const RuleInfo* FindRule(absl::string_view name);

// The rule one of whose types is `type` (case aside), or null.
const RuleInfo* FindRuleByType(absl::string_view type);

// The registry's names, for errors ("sgd, adagrad").
std::string RegisteredRuleNames();

// A param's value in `config` (its field, or rule_params, else its
// default).
double RuleParamValue(const OptimizerConfig& config, const RuleParam& param);

// `base` (its schedule kept) made a config of `rule`: kind kRule, each
// param from `params` (torch's keywords; a bool 0 or 1) or its default, lr,
// weight_decay and eps in their fields; then ValidateRuleConfig. An
// unknown keyword is INVALID_ARGUMENT naming it.
absl::StatusOr<OptimizerConfig> MakeRuleConfig(
    const RuleInfo& rule, const std::map<std::string, double>& params,
    OptimizerConfig base = {});

// `config` (kind kRule) against its rule: a registered name, every param
// present in rule_params known and within its range, none missing, the
// rule's own check. INVALID_ARGUMENT naming the param.
absl::Status ValidateRuleConfig(const OptimizerConfig& config);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIMIZER_RULES_H_
