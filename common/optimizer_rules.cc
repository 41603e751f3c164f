#include "common/optimizer_rules.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

constexpr double kRequired = std::numeric_limits<double>::quiet_NaN();

RuleParam RuleNumber(const char* name, double default_value, double min,
                     double max) {
  RuleParam p;
  p.name = name;
  p.default_value = default_value;
  p.min = min;
  p.max = max;
  return p;
}

RuleParam RuleBool(const char* name, bool default_value) {
  RuleParam p;
  p.name = name;
  p.kind = RuleParam::Kind::kBool;
  p.default_value = default_value ? 1 : 0;
  p.min = 0;
  p.max = 1;
  return p;
}

RuleParam RulePair(const char* name, double first, double second) {
  RuleParam p;
  p.name = name;
  p.kind = RuleParam::Kind::kPair;
  p.default_value = first;
  p.second_default = second;
  p.min = 0;
  p.max = 1;
  p.below_max = true;
  return p;
}

FixedParam FixedNumber(const char* name, double value, const char* why) {
  return FixedParam{name, value, why, /*is_bool=*/false};
}

const FixedParam kNotMaximize = {
    "maximize", 0, "the servers minimize (negate the loss to maximize)"};
const FixedParam kNoAmsgrad = {"amsgrad", 0, "the servers keep no max of v"};

// torch.optim.AdamW's and Adam's params and defaults, weight decay aside.
std::vector<RuleParam> AdamParams(double weight_decay) {
  return {RuleNumber("lr", 1e-3, 1e-30, 1e6), RulePair("betas", 0.9, 0.999),
          RuleNumber("eps", 1e-8, 1e-30, 1),
          RuleNumber("weight_decay", weight_decay, 0, 1e6)};
}

// bitsandbytes' AdamW8bit / Adam8bit (their Paged names the same rule: the
// servers' state is in host memory, where paging to it buys nothing), with
// bitsandbytes' defaults. Its switches for other algorithms must keep their
// defaults; min_8bit_size (its 32-bit state for small tensors) has no
// effect here: every element's state is 8-bit.
RuleInfo EightBitAdam(bool adamw) {
  const std::vector<StateSlot> slots = {{"exp_avg", SlotFormat::kQ8Signed},
                                        {"exp_avg_sq", SlotFormat::kQ8Unsigned}};
  return RuleInfo{
      .name = adamw ? "adamw8bit" : "adam8bit",
      .kind = adamw ? OptimizerKind::kAdamW8bit : OptimizerKind::kAdam8bit,
      .types = adamw ? std::vector<std::string>{"AdamW8bit", "PagedAdamW8bit"}
                     : std::vector<std::string>{"Adam8bit", "PagedAdam8bit"},
      .description = adamw ? "AdamW with m and v in 8 bits (bitsandbytes' AdamW8bit)"
                           : "Adam with m and v in 8 bits (bitsandbytes' Adam8bit)",
      .params = AdamParams(adamw ? 1e-2 : 0.0),
      .fixed = {{"amsgrad", 0, "the 8-bit Adams keep no max of v"},
                {"block_wise", 1, "the state is quantized in blocks of 2048"},
                FixedNumber("percentile_clipping", 100,
                            "clip the gradient with gradient_clipping instead"),
                FixedNumber("optim_bits", 8,
                            "an 8-bit type; use \"AdamW\" for 32-bit state"),
                FixedNumber("max_unorm", 0, "no update-norm clipping")},
      .no_effect = {"min_8bit_size", "is_paged", "args"},
      .slots = slots};
}

absl::Status CheckSgd(const OptimizerConfig& c) {
  const RuleInfo& r = *FindRule("sgd");
  const bool nesterov = RuleParamValue(c, *r.FindParam("nesterov")) != 0;
  const double momentum = RuleParamValue(c, *r.FindParam("momentum"));
  const double dampening = RuleParamValue(c, *r.FindParam("dampening"));
  if (nesterov && (momentum <= 0 || dampening != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.params.nesterov: Nesterov momentum needs momentum > 0 and "
        "dampening 0 (as torch.optim.SGD); got momentum ", momentum,
        ", dampening ", dampening));
  }
  return absl::OkStatus();
}

// The table. Each rule's update is in optim/ (its file names it).
std::vector<RuleInfo> MakeRegistry() {
  std::vector<RuleInfo> rules;
  // torch.optim.AdamW (optim/optimizer.h AdamUpdate): decoupled weight
  // decay p -= lr * wd * p.
  const std::vector<StateSlot> adam_slots = {{"exp_avg", SlotFormat::kFp32},
                                             {"exp_avg_sq", SlotFormat::kFp32}};
  const std::vector<std::string> torch_adam_keys = {
      "torch_adam", "foreach", "capturable", "differentiable", "fused"};
  rules.push_back(RuleInfo{
      .name = "adamw",
      .kind = OptimizerKind::kAdamW,
      .types = {"AdamW"},
      .torch_class = "AdamW",
      .description = "AdamW, decoupled weight decay (torch.optim.AdamW)",
      .params = AdamParams(0.01),
      .fixed = {{"adam_w_mode", 1,
                 "use type \"Adam\" with adam_w_mode false for L2 weight decay"},
                kNoAmsgrad, kNotMaximize},
      .no_effect = torch_adam_keys,
      .slots = adam_slots});
  // torch.optim.Adam: L2 weight decay g += wd * p. DeepSpeed's type "Adam"
  // is AdamW unless its adam_w_mode is false.
  rules.push_back(RuleInfo{
      .name = "adam",
      .kind = OptimizerKind::kAdam,
      .types = {"Adam"},
      .torch_class = "Adam",
      .description = "Adam, L2 weight decay (torch.optim.Adam)",
      .params = AdamParams(0.0),
      .fixed = {kNoAmsgrad, kNotMaximize},
      .no_effect = torch_adam_keys,
      .slots = adam_slots,
      .mode_param = "adam_w_mode",
      .mode_rule = "adamw"});
  // Lion (Chen et al. 2023; optim/lion.h), DeepSpeed's and the paper's
  // defaults; eps and Adam's switches do nothing.
  rules.push_back(RuleInfo{
      .name = "lion",
      .kind = OptimizerKind::kLion,
      .types = {"Lion"},
      .description = "Lion, the sign of interpolated momentum (Chen et al. 2023)",
      .params = {RuleNumber("lr", 1e-4, 1e-30, 1e6), RulePair("betas", 0.9, 0.99),
                 RuleNumber("weight_decay", 0, 0, 1e6)},
      .no_effect = {"eps", "adam_w_mode", "torch_adam"},
      .slots = {{"exp_avg", SlotFormat::kFp32}}});
  rules.push_back(EightBitAdam(true));
  rules.push_back(EightBitAdam(false));
  // torch.optim.SGD (optim/sgd.cc): momentum, dampening, Nesterov, L2
  // weight decay; the buffer starts as the first step's gradient.
  rules.push_back(RuleInfo{
      .name = "sgd",
      .types = {"SGD"},
      .torch_class = "SGD",
      .description = "stochastic gradient descent with momentum (torch.optim.SGD)",
      .params = {RuleNumber("lr", kRequired, 1e-30, 1e6),
                 RuleNumber("momentum", 0, 0, 1e6),
                 RuleNumber("dampening", 0, 0, 1),
                 RuleNumber("weight_decay", 0, 0, 1e6),
                 RuleBool("nesterov", false)},
      .fixed = {kNotMaximize},
      .no_effect = {"foreach", "differentiable"},
      .slots = {{"momentum_buffer", SlotFormat::kFp32}},
      .check = &CheckSgd});
  // torch.optim.Adagrad (optim/adagrad.cc), DeepSpeed's CPU Adagrad: the
  // sum of squared gradients, the step lr / (1 + (t - 1) lr_decay).
  rules.push_back(RuleInfo{
      .name = "adagrad",
      .types = {"Adagrad"},
      .torch_class = "Adagrad",
      .description = "Adagrad (torch.optim.Adagrad, DeepSpeed's CPU Adagrad)",
      .params = {RuleNumber("lr", 1e-2, 1e-30, 1e6),
                 RuleNumber("lr_decay", 0, 0, 1e6),
                 RuleNumber("weight_decay", 0, 0, 1e6),
                 RuleNumber("initial_accumulator_value", 0, 0, 1e6),
                 RuleNumber("eps", 1e-10, 1e-30, 1)},
      .fixed = {kNotMaximize},
      .no_effect = {"foreach", "differentiable"},
      .slots = {{"sum", SlotFormat::kFp32}}});
  return rules;
}

}  // namespace

const RuleParam* RuleInfo::FindParam(absl::string_view param) const {
  for (const RuleParam& p : params) {
    if (p.name == param) return &p;
  }
  return nullptr;
}

const std::vector<RuleInfo>& RegisteredRules() {
  static const std::vector<RuleInfo>* const rules =
      new std::vector<RuleInfo>(MakeRegistry());
  return *rules;
}

const RuleInfo* FindRule(absl::string_view name) {
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const RuleInfo& RuleOfKind(OptimizerKind kind) {
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.kind == kind && kind != OptimizerKind::kRule) return r;
  }
  return RegisteredRules().front();  // kRule: not a kind's; never asked
}

const RuleInfo* RuleOf(const OptimizerConfig& config) {
  if (config.kind != OptimizerKind::kRule) return &RuleOfKind(config.kind);
  const RuleInfo* r = FindRule(config.rule);
  return r != nullptr && r->kind == OptimizerKind::kRule ? r : nullptr;
}

std::string RuleParam::RangeText() const {
  const std::string range = absl::StrCat("[", min, ", ", max, below_max ? ")" : "]");
  switch (kind) {
    case Kind::kBool:
      return "true or false";
    case Kind::kPair:
      return absl::StrCat("[", name == "betas" ? "beta1, beta2" : "a, b",
                          "], two numbers in ", range);
    case Kind::kNumber:
      break;
  }
  return absl::StrCat("a number in ", range);
}

const RuleInfo* FindRuleByType(absl::string_view type) {
  const std::string lower = absl::AsciiStrToLower(type);
  for (const RuleInfo& r : RegisteredRules()) {
    for (const std::string& t : r.types) {
      if (absl::AsciiStrToLower(t) == lower) return &r;
    }
  }
  return nullptr;
}

std::string RegisteredRuleNames(bool kind_rule_only) {
  std::string out;
  for (const RuleInfo& r : RegisteredRules()) {
    if (kind_rule_only && r.kind != OptimizerKind::kRule) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", r.name);
  }
  return out;
}

double RuleParamValue(const OptimizerConfig& c, const RuleParam& p) {
  if (p.name == "lr") return c.lr;
  if (p.name == "weight_decay") return c.weight_decay;
  if (p.name == "eps") return c.eps;
  if (p.name == "betas") return c.beta1;  // a pair: its first
  auto it = c.rule_params.find(p.name);
  return it != c.rule_params.end() ? it->second : p.default_value;
}

absl::StatusOr<OptimizerConfig> MakeRuleConfig(
    const RuleInfo& rule, const std::map<std::string, double>& params,
    OptimizerConfig o) {
  for (const auto& [name, value] : params) {
    const size_t bracket = name.find('[');
    const RuleParam* p = rule.FindParam(name.substr(0, bracket));
    if (p == nullptr ||
        (bracket != std::string::npos) != (p->kind == RuleParam::Kind::kPair)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.params.", name, ": not a param of ", rule.name));
    }
  }
  o.kind = rule.kind;
  o.rule = rule.kind == OptimizerKind::kRule ? rule.name : "";
  o.rule_params.clear();
  for (const RuleParam& p : rule.params) {
    if (p.kind == RuleParam::Kind::kPair) {
      // betas: the only pair, in beta1 and beta2.
      auto first = params.find(p.name + "[0]");
      auto second = params.find(p.name + "[1]");
      o.beta1 = first != params.end() ? first->second : p.default_value;
      o.beta2 = second != params.end() ? second->second : p.second_default;
      continue;
    }
    auto it = params.find(p.name);
    const double value = it != params.end() ? it->second : p.default_value;
    if (p.name == "lr") {
      o.lr = value;
    } else if (p.name == "weight_decay") {
      o.weight_decay = value;
    } else if (p.name == "eps") {
      o.eps = value;
    } else {
      o.rule_params[p.name] = value;
    }
  }
  if (o.kind == OptimizerKind::kRule) {
    if (absl::Status s = ValidateRuleConfig(o); !s.ok()) return s;
  }
  return o;
}

absl::Status ValidateRuleConfig(const OptimizerConfig& c) {
  const RuleInfo* r = RuleOf(c);
  if (r == nullptr) {
    const RuleInfo* kind = FindRule(c.rule);
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.rule: unknown rule \"", c.rule, "\"",
        kind != nullptr ? " (a rule with its own kind, not named by rule)" : "",
        "; the registered rules: ", RegisteredRuleNames(/*kind_rule_only=*/true)));
  }
  for (const auto& [name, value] : c.rule_params) {
    const RuleParam* p = r->FindParam(name);
    if (p == nullptr || p->common_field()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.rule_params: \"", name, "\" is not a param of rule ",
          r->name, p != nullptr ? " kept apart (it has its own field)" : ""));
    }
  }
  for (const RuleParam& p : r->params) {
    const double v = RuleParamValue(c, p);
    if (std::isnan(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.params.", p.name, " is required by rule ", r->name));
    }
    if (!p.InRange(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.params.", p.name, " = ", v, ": rule ", r->name, " takes ",
          p.RangeText()));
    }
  }
  if (r->check != nullptr) return r->check(c);
  return absl::OkStatus();
}

}  // namespace zeroshard
