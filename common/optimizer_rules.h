// The registry of optimizer rules described by data (docs/DESIGN.md,
// "Optimizer rules"): each entry says what the config parser, the wire
// conversion, validation, the store's slots, the memory estimate, Inspect,
// zeroshard-ctl and the PyTorch front-end need to know about a rule, so
// that none of them names it. Its update lives in optim/ (an element-wise
// rule's found by name in optim/update_rule.cc's table, a whole-tensor
// rule's in optim/whole_tensor_rule.cc's).
//
// Every element-wise rule is an entry: the five built before the registry
// (AdamW, Adam, Lion and the 8-bit Adams) keep their OptimizerKind (the
// wire's and checkpoints' enum, so that their files and configs read as
// before); a rule added since is OptimizerKind::kRule with
// OptimizerConfig::rule its name. Params are torch's keywords: "lr",
// "weight_decay", "eps" and "betas" live in OptimizerConfig's own fields
// (so schedules, parameter groups and the front-end's per-step settings
// drive them); every other param in OptimizerConfig::rule_params, by name.
// A bool param is 0 or 1 there.
//
// A rule of scope kWholeTensor (Muon, Adafactor) updates each whole tensor
// of a parameter group (common/param_groups.h) in place of the element-wise
// rule: a group holds it as a TensorRule, its name and every param by
// keyword; its state lives in the element-wise rule's FP32 slots as its
// `tensor_state` declares.
//
// Adding a rule: an entry in optimizer_rules.cc's table and its update in
// optim/ (a file, and a line in optim/update_rule.cc's or
// optim/whole_tensor_rule.cc's table).
//
//   const RuleInfo* r = FindRuleByType("SGD");    // or FindRule("sgd")
//   for (const RuleParam& p : r->params) ... p.name, p.default_value ...
#ifndef ZEROSHARD_COMMON_OPTIMIZER_RULES_H_
#define ZEROSHARD_COMMON_OPTIMIZER_RULES_H_

#include <cstdint>
#include <functional>
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
  // kPair: two numbers (torch's betas: OptimizerConfig's beta1 and beta2;
  // a whole-tensor rule's in its params as "name[0]" and "name[1]");
  // default_value and second_default their defaults. kChoice: one of
  // `choices` (strings in a config), its index.
  enum class Kind { kNumber, kBool, kPair, kChoice };
  std::string name;  // torch's keyword, e.g. "momentum"
  Kind kind = Kind::kNumber;
  // The default; NaN when the config must give it (torch's `required`).
  double default_value = 0;
  // A number's range: [min, max], with ( when above_min and ) when
  // below_max.
  double min = 0;
  double max = 1e6;
  bool above_min = false;
  bool below_max = false;
  double second_default = 0;  // kPair
  // True when the default stands for "none" (Python's None, JSON null:
  // Adafactor's lr and beta1), accepted though outside the range.
  bool default_is_none = false;
  std::vector<std::string> choices;  // kChoice
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
    if (default_is_none && v == default_value) return true;
    if (kind == Kind::kBool) return v == 0 || v == 1;
    if (kind == Kind::kChoice) {
      return v >= 0 && v < static_cast<double>(choices.size()) && v == static_cast<int>(v);
    }
    return (above_min ? v > min : v >= min) && (below_max ? v < max : v <= max);
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

// A whole-tensor rule's state for one tensor, kept in the element-wise
// rule's FP32 slot `slot` (whose n elements it must fit in):
//   kElements: one value per element, from the slot's start;
//   kRows:     a factored tensor's row statistics (batch x rows values,
//              the tensor seen as batch matrices over its last two
//              dimensions), from the slot's start;
//   kColumns:  its column statistics (batch x cols), after the rows.
// `applies` limits it to tensors of one or of at least two dimensions;
// `unless_none` to a rule whose param of that name is not none (Adafactor's
// first moment needs beta1).
struct TensorSlot {
  enum class Extent { kElements, kRows, kColumns };
  enum class Applies { kAlways, kVectors, kMatrices };
  std::string name;  // as torch's state_dict names it ("exp_avg_sq_row")
  Extent extent = Extent::kElements;
  Applies applies = Applies::kAlways;
  int slot = 0;
  std::string unless_none;
};

// Whether a rule updates elements alone or each whole tensor.
enum class RuleScope { kElement, kWholeTensor };

// A rule's param values by keyword (a config's, or a tensor rule's).
using RuleValues = std::function<double(absl::string_view name)>;

struct RuleInfo {
  // The registry's name ("sgd"): OptimizerConfig::rule, the wire, the
  // resolved config, logs; a kind's OptimizerName ("adamw"); a tensor
  // rule's TensorRule::name ("muon").
  std::string name;
  RuleScope scope = RuleScope::kElement;
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
  // The state kept per element, in the store's order (element-wise).
  std::vector<StateSlot> slots;
  // A whole-tensor rule's state per tensor, in the element-wise rule's
  // slots.
  std::vector<TensorSlot> tensor_state;
  // A whole-tensor rule that takes only the class "matrices" (Muon: the
  // hidden matrices), with the reason for errors; empty: any class.
  std::string matrices_only;
  // A condition over the params torch checks (SGD's nesterov needs
  // momentum > 0 and dampening 0); OK when none. `what` prefixes the
  // param's name in errors ("optimizer.params").
  absl::Status (*check)(const RuleValues& values, absl::string_view what) = nullptr;
  // A type whose bool keyword `mode_param` (default true) selects rule
  // `mode_rule` and, when false, this one: DeepSpeed's "Adam" with its
  // adam_w_mode (AdamW unless false). The front-end sets it false for the
  // torch class. Empty: none.
  std::string mode_param;
  std::string mode_rule;

  const RuleParam* FindParam(absl::string_view param) const;
  bool element_wise() const { return scope == RuleScope::kElement; }
  // The element slots its tensor_state uses (the most slot + 1).
  size_t SlotsNeeded() const;
};

// Every rule of the registry, in the table's order.
const std::vector<RuleInfo>& RegisteredRules();

// The rule named `name`, or null.
const RuleInfo* FindRule(absl::string_view name);

// The whole-tensor rule named `name`, or null.
const RuleInfo* FindTensorRule(absl::string_view name);

// The entry of a kind other than kRule (never null).
const RuleInfo& RuleOfKind(OptimizerKind kind);

// A config's entry: its kind's, or its kRule name's (null if that is not a
// registered kRule rule).
const RuleInfo* RuleOf(const OptimizerConfig& config);

// The rule one of whose types is `type` (case aside), or null.
const RuleInfo* FindRuleByType(absl::string_view type);

// The registry's element-wise names, for errors ("adamw, adam, ..., sgd,
// adagrad"); with kind_rule_only, those of kind kRule alone ("sgd,
// adagrad").
std::string RegisteredRuleNames(bool kind_rule_only = false);

// The whole-tensor rules' names ("muon, adafactor") and types ("Muon or
// Adafactor"), for errors.
std::string TensorRuleNames();
std::string TensorRuleTypes();

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

// A parameter group's whole-tensor rule (docs/DESIGN.md, "Rules for whole
// tensors"): a registry name and every param of its entry by keyword (a
// pair as "name[0]" and "name[1]", a bool 0 or 1, a choice its index,
// none as the param's default). Empty name: none.
struct TensorRule {
  std::string name;
  std::map<std::string, double> params;
  bool active() const { return !name.empty(); }
  // Param `name` (NaN if it has none).
  double Param(absl::string_view param) const;
  // The decoupled weight decay the rule applies (its weight_decay).
  double decay() const { return Param("weight_decay"); }
  friend bool operator==(const TensorRule&, const TensorRule&) = default;
};

// The whole-tensor rule `name` from `params` (keywords as TensorRule keeps
// them; absent ones take their defaults), validated: INVALID_ARGUMENT
// naming `what`.param for an unknown keyword, a value out of range, a
// required one missing, or the rule's own check.
absl::StatusOr<TensorRule> MakeTensorRule(
    absl::string_view name, const std::map<std::string, double>& params,
    absl::string_view what = "optimizer.params");

// `rule` against its entry, as MakeTensorRule checks it; OK for none.
absl::Status ValidateTensorRule(const TensorRule& rule, absl::string_view what);

// Where a whole-tensor rule's state slot lies for one tensor of `shape`,
// within its element slot `slot`: floats [offset, offset + count). count 0
// when the slot does not apply to the tensor (its rank, or a param of
// `unless_none` that is none). kRows and kColumns see the tensor as batch
// matrices over its last two dimensions (batch the product of the others).
struct TensorSlotPlace {
  int slot = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
};
TensorSlotPlace PlaceTensorSlot(const TensorSlot& slot, const TensorRule& rule,
                                const std::vector<int64_t>& shape);

// One line of a tensor rule for logs and the CLI: "Muon lr 0.02, momentum
// 0.95, nesterov true, weight_decay 0, ns_precision fp32".
std::string DescribeTensorRule(const TensorRule& rule);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_OPTIMIZER_RULES_H_
