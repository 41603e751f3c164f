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

const FixedParam kNotMaximize = {
    "maximize", 0, "the servers minimize (negate the loss to maximize)"};

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

const RuleInfo* FindRuleByType(absl::string_view type) {
  const std::string lower = absl::AsciiStrToLower(type);
  for (const RuleInfo& r : RegisteredRules()) {
    for (const std::string& t : r.types) {
      if (absl::AsciiStrToLower(t) == lower) return &r;
    }
  }
  return nullptr;
}

std::string RegisteredRuleNames() {
  std::string out;
  for (const RuleInfo& r : RegisteredRules()) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", r.name);
  }
  return out;
}

double RuleParamValue(const OptimizerConfig& c, const RuleParam& p) {
  if (p.name == "lr") return c.lr;
  if (p.name == "weight_decay") return c.weight_decay;
  if (p.name == "eps") return c.eps;
  auto it = c.rule_params.find(p.name);
  return it != c.rule_params.end() ? it->second : p.default_value;
}

absl::StatusOr<OptimizerConfig> MakeRuleConfig(
    const RuleInfo& rule, const std::map<std::string, double>& params,
    OptimizerConfig o) {
  for (const auto& [name, value] : params) {
    if (rule.FindParam(name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.params.", name, ": not a param of ", rule.name));
    }
  }
  o.kind = OptimizerKind::kRule;
  o.rule = rule.name;
  o.rule_params.clear();
  for (const RuleParam& p : rule.params) {
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
  if (absl::Status s = ValidateRuleConfig(o); !s.ok()) return s;
  return o;
}

absl::Status ValidateRuleConfig(const OptimizerConfig& c) {
  const RuleInfo* r = FindRule(c.rule);
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.rule: unknown rule \"", c.rule, "\"; the registered rules: ",
        RegisteredRuleNames()));
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
    const bool in = p.kind == RuleParam::Kind::kBool
                        ? (v == 0 || v == 1)
                        : (v >= p.min && v <= p.max);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.params.", p.name, " = ", v, ": rule ", r->name, " takes ",
          p.kind == RuleParam::Kind::kBool
              ? std::string("true or false")
              : absl::StrCat("a number in [", p.min, ", ", p.max, "]")));
    }
  }
  if (r->check != nullptr) return r->check(c);
  return absl::OkStatus();
}

}  // namespace zeroshard
