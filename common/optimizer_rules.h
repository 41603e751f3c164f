// The registry of element-wise optimizer rules described by data
// (docs/DESIGN.md, "Optimizer rules"): each entry says what the config
// parser, the wire conversion, validation, the store's slots, the memory
// estimate, Inspect, zeroshard-ctl and the PyTorch front-end need to know
// about a rule, so that none of them names it. Its update lives in optim/
// (optim/update_rule.cc's table finds it by name).
//
// Every element-wise rule is an entry: the five built before the registry
// (AdamW, Adam, Lion and the 8-bit Adams) keep their OptimizerKind (the
// wire's and checkpoints' enum, so that their files and configs read as
// before); a rule added since is OptimizerKind::kRule with
// OptimizerConfig::rule its name. Params are torch's keywords: "lr",
// "weight_decay", "eps" and "betas" live in OptimizerConfig's own fields
// (so schedules, parameter groups and the front-end's per-step settings
// drive them); every other param in OptimizerConfig::rule_params, by name.
// A bool param is 0 or 1 there. The rules for whole tensors (Muon,
// Adafactor) are parameter groups' rules (common/param_groups.h), not
// entries here.
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
  // kPair: two numbers (torch's betas), OptimizerConfig's beta1 and beta2;
  // default_value and second_default their defaults.
  enum class Kind { kNumber, kBool, kPair };
  std::string name;  // torch's keyword, e.g. "momentum"
  Kind kind = Kind::kNumber;
  // The default; NaN when the config must give it (torch's `required`).
  double default_value = 0;
  // A number's range: [min, max], or [min, max) when below_max.
  double min = 0;
  double max = 1e6;
  bool below_max = false;
  double second_default = 0;  // kPair
  // True when it lives in OptimizerConfig's field of that name ("lr",
  // "weight_decay", "eps", "betas": beta1 and beta2) rather than in
  // rule_params.
  bool common_field() const {
    return name == "lr" || name == "weight_decay" || name == "eps" ||
           name == "betas";
  }
  // Whether v is a value it takes (a bool: 0 or 1; a pair: each of its
  // two numbers).
  bool InRange(double v) const {
    if (kind == Kind::kBool) return v == 0 || v == 1;
    return v >= min && (below_max ? v < max : v <= max);
  }
  // The range as errors say it ("a number in [0, 1)").
  std::string RangeText() const;
};

// A keyword the rule accepts only at one value (torch's maximize: false),
// with the reason a different value is refused.
struct FixedParam {
  std::string name;
  double value = 0;  // a bool: 0 or 1
  std::string why;
  bool is_bool = true;
};

struct RuleInfo {
  // The registry's name ("sgd"): OptimizerConfig::rule, the wire, the
  // resolved config, logs; a kind's OptimizerName ("adamw").
  std::string name;
  // The kind a config of this rule has: kRule for a rule named on the wire
  // by `name`; the enum value for the five that have one.
  OptimizerKind kind = OptimizerKind::kRule;
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
  // A type whose bool keyword `mode_param` (default true) selects rule
  // `mode_rule` and, when false, this one: DeepSpeed's "Adam" with its
  // adam_w_mode (AdamW unless false). The front-end sets it false for the
  // torch class. Empty: none.
  std::string mode_param;
  std::string mode_rule;

  const RuleParam* FindParam(absl::string_view param) const;
};

// Every rule of the registry, in the table's order.
const std::vector<RuleInfo>& RegisteredRules();

// The rule named `name`, or null.
const RuleInfo* FindRule(absl::string_view name);

// The entry of a kind other than kRule (never null).
const RuleInfo& RuleOfKind(OptimizerKind kind);

// A config's entry: its kind's, or its kRule name's (null if that is not a
// registered kRule rule).
const RuleInfo* RuleOf(const OptimizerConfig& config);

// The rule one of whose types is `type` (case aside), or null.
const RuleInfo* FindRuleByType(absl::string_view type);

// The registry's names, for errors ("adamw, adam, ..., sgd, adagrad"); with
// kind_rule_only, those of kind kRule alone ("sgd, adagrad").
std::string RegisteredRuleNames(bool kind_rule_only = false);

// A param's value in `config` (its field, or rule_params, else its
// default).
double RuleParamValue(const OptimizerConfig& config, const RuleParam& param);

// `base` (its schedule kept) made a config of `rule`: its kind, each param
// from `params` (torch's keywords; a bool 0 or 1; a pair as "betas[0]" and
// "betas[1]") or its default, the common ones in their fields; then, for
// kind kRule, ValidateRuleConfig. An unknown keyword is INVALID_ARGUMENT
// naming it.
absl::StatusOr<OptimizerConfig> MakeRuleConfig(
    const RuleInfo& rule, const std::map<std::string, double>& params,
    OptimizerConfig base = {});

// `config` (kind kRule) against its rule: a registered name, every param
// present in rule_params known and within its range, none missing, the
// rule's own check. INVALID_ARGUMENT naming the param.
absl::Status ValidateRuleConfig(const OptimizerConfig& config);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIMIZER_RULES_H_
