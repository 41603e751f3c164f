#include "common/optimizer_rules.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

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

RuleParam RulePair(const char* name, double first, double second,
                   double min = 0, double max = 1, bool below_max = true) {
  RuleParam p;
  p.name = name;
  p.kind = RuleParam::Kind::kPair;
  p.default_value = first;
  p.second_default = second;
  p.min = min;
  p.max = max;
  p.below_max = below_max;
  return p;
}

// A number in [min, max).
RuleParam RuleBelow(const char* name, double default_value, double min, double max) {
  RuleParam p = RuleNumber(name, default_value, min, max);
  p.below_max = true;
  return p;
}

// A number in (0, 1e6].
RuleParam RulePositive(const char* name, double default_value) {
  RuleParam p = RuleNumber(name, default_value, 0, 1e6);
  p.above_min = true;
  return p;
}

// A number whose default is none (Python's None), else in the range.
RuleParam RuleOrNone(RuleParam p, double none) {
  p.default_value = none;
  p.default_is_none = true;
  return p;
}

RuleParam RuleChoice(const char* name, std::vector<std::string> choices) {
  RuleParam p;
  p.name = name;
  p.kind = RuleParam::Kind::kChoice;
  p.choices = std::move(choices);
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

absl::Status CheckSgd(const RuleValues& values, absl::string_view what) {
  const bool nesterov = values("nesterov") != 0;
  const double momentum = values("momentum");
  const double dampening = values("dampening");
  if (nesterov && (momentum <= 0 || dampening != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".nesterov: Nesterov momentum needs momentum > 0 and "
        "dampening 0 (as torch.optim.SGD); got momentum ", momentum,
        ", dampening ", dampening));
  }
  return absl::OkStatus();
}

// Hugging Face's Adafactor refuses a manual lr beside relative_step, and
// warmup_init without it; without relative_step an lr is required.
absl::Status CheckAdafactor(const RuleValues& values, absl::string_view what) {
  const bool relative = values("relative_step") != 0;
  const bool lr_given = values("lr") != 0;  // 0: none
  if (relative && lr_given) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", what, ".lr\": cannot be combined with relative_step (the step "
        "size is then 1/sqrt(t)); set relative_step to false"));
  }
  if (!relative && !lr_given) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", what, ".lr\": must be a positive number (at most 1e6) without "
        "relative_step"));
  }
  if (values("warmup_init") != 0 && !relative) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", what, ".warmup_init\": requires relative_step"));
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
  // Muon (Keller Jordan 2024; optim/muon.h) on each whole hidden matrix,
  // its published defaults; ns_precision "bf16" runs the Newton-Schulz
  // products in BF16 as the published code does on a GPU.
  rules.push_back(RuleInfo{
      .name = "muon",
      .scope = RuleScope::kWholeTensor,
      .types = {"Muon"},
      .description = "Muon, orthogonalized momentum for hidden matrices (Keller Jordan 2024)",
      .params = {RulePositive("lr", 0.02), RuleBelow("momentum", 0.95, 0, 1),
                 RuleBool("nesterov", true), RuleNumber("weight_decay", 0, 0, 1e6),
                 RuleChoice("ns_precision", {"fp32", "bf16"})},
      .tensor_state = {{.name = "momentum_buffer", .slot = 0}},
      .matrices_only = "Muon is for 2-D hidden matrices (the class matrices); "
                       "the others stay with optimizer.type, as Muon's authors "
                       "prescribe"});
  // Adafactor (Shazeer & Stern 2018; optim/adafactor.h), Hugging Face's
  // names and defaults: lr and beta1 None unless given; a tensor of two
  // or more dimensions keeps row and column statistics of its last two.
  using Extent = TensorSlot::Extent;
  using Applies = TensorSlot::Applies;
  rules.push_back(RuleInfo{
      .name = "adafactor",
      .scope = RuleScope::kWholeTensor,
      .types = {"Adafactor"},
      .description = "Adafactor, factored second moments (Hugging Face's Adafactor)",
      .params = {RuleOrNone(RulePositive("lr", 0), 0),
                 RulePair("eps", 1e-30, 1e-3, 0, 1e6, false),
                 RulePositive("clip_threshold", 1.0),
                 RuleBelow("decay_rate", -0.8, -1, 0),
                 RuleOrNone(RuleBelow("beta1", 0, 0, 1), -1),
                 RuleNumber("weight_decay", 0, 0, 1e6),
                 RuleBool("scale_parameter", true), RuleBool("relative_step", true),
                 RuleBool("warmup_init", false)},
      .tensor_state = {{"exp_avg", Extent::kElements, Applies::kAlways, 0, "beta1"},
                       {"exp_avg_sq_row", Extent::kRows, Applies::kMatrices, 1},
                       {"exp_avg_sq_col", Extent::kColumns, Applies::kMatrices, 1},
                       {"exp_avg_sq", Extent::kElements, Applies::kVectors, 1}},
      .check = &CheckAdafactor});
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

size_t RuleInfo::SlotsNeeded() const {
  size_t n = 0;
  for (const TensorSlot& t : tensor_state) n = std::max(n, static_cast<size_t>(t.slot) + 1);
  return n;
}

const RuleInfo* FindRule(absl::string_view name) {
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.name == name && r.element_wise()) return &r;
  }
  return nullptr;
}

const RuleInfo* FindTensorRule(absl::string_view name) {
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.name == name && !r.element_wise()) return &r;
  }
  return nullptr;
}

const RuleInfo& RuleOfKind(OptimizerKind kind) {
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.kind == kind && kind != OptimizerKind::kRule && r.element_wise()) return r;
  }
  return RegisteredRules().front();  // kRule: not a kind's; never asked
}

const RuleInfo* RuleOf(const OptimizerConfig& config) {
  if (config.kind != OptimizerKind::kRule) return &RuleOfKind(config.kind);
  const RuleInfo* r = FindRule(config.rule);
  return r != nullptr && r->kind == OptimizerKind::kRule ? r : nullptr;
}

namespace {

// The param a params map's key names: a param by its keyword, a pair's
// half as "name[0]" or "name[1]"; null for anything else.
const RuleParam* ParamOfKey(const RuleInfo& rule, const std::string& key) {
  const size_t bracket = key.find('[');
  const RuleParam* p = rule.FindParam(key.substr(0, bracket));
  if (p == nullptr) return nullptr;
  const bool pair = p->kind == RuleParam::Kind::kPair;
  if (bracket == std::string::npos) return pair ? nullptr : p;
  return pair && (key == p->name + "[0]" || key == p->name + "[1]") ? p : nullptr;
}

// The range of a param as errors say it, and whether `v` is in it.
absl::Status CheckParamValue(const RuleParam& p, double v, absl::string_view what,
                             absl::string_view rule) {
  if (p.InRange(v)) return absl::OkStatus();
  std::string shown = absl::StrCat(v);
  if (p.kind == RuleParam::Kind::kBool) shown = v != 0 ? "true" : "false";
  return absl::InvalidArgumentError(absl::StrCat(what, ".", p.name, " = ", shown,
                                                 ": rule ", rule, " takes ",
                                                 p.RangeText()));
}

}  // namespace

std::string RuleParam::RangeText() const {
  const std::string range = absl::StrCat(above_min ? "(" : "[", min, ", ", max,
                                         below_max ? ")" : "]");
  const std::string none = default_is_none ? " (or null: none)" : "";
  switch (kind) {
    case Kind::kBool:
      return "true or false";
    case Kind::kChoice: {
      std::string out;
      for (size_t i = 0; i < choices.size(); ++i) {
        absl::StrAppend(&out, i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ",
                        "\"", choices[i], "\"");
      }
      return out;
    }
    case Kind::kPair:
      return absl::StrCat("[", name == "betas" ? "beta1, beta2" : "a, b",
                          "], two numbers in ", range);
    case Kind::kNumber:
      break;
  }
  return absl::StrCat("a number in ", range, none);
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
    if (!r.element_wise() || (kind_rule_only && r.kind != OptimizerKind::kRule)) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", r.name);
  }
  return out;
}

std::string TensorRuleNames() {
  std::string out;
  for (const RuleInfo& r : RegisteredRules()) {
    if (!r.element_wise()) absl::StrAppend(&out, out.empty() ? "" : ", ", r.name);
  }
  return out;
}

std::string TensorRuleTypes() {
  std::vector<std::string> types;
  for (const RuleInfo& r : RegisteredRules()) {
    if (!r.element_wise()) types.push_back(r.types.front());
  }
  std::string out;
  for (size_t i = 0; i < types.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : i + 1 == types.size() ? " or " : ", ", types[i]);
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
    if (ParamOfKey(rule, name) == nullptr) {
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
    RETURN_IF_ERROR(CheckParamValue(p, v, "optimizer.params", r->name));
  }
  if (r->check == nullptr) return absl::OkStatus();
  return r->check(
      [&](absl::string_view name) {
        const RuleParam* p = r->FindParam(name);
        return p != nullptr ? RuleParamValue(c, *p) : std::nan("");
      },
      "optimizer.params");
}

double TensorRule::Param(absl::string_view param) const {
  auto it = params.find(std::string(param));
  return it != params.end() ? it->second : std::nan("");
}

absl::StatusOr<TensorRule> MakeTensorRule(
    absl::string_view name, const std::map<std::string, double>& params,
    absl::string_view what) {
  const RuleInfo* r = FindTensorRule(name);
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": unknown rule for whole tensors \"", name, "\" (want ",
        TensorRuleNames(), ")"));
  }
  TensorRule out;
  out.name = r->name;
  for (const auto& [key, value] : params) {
    if (ParamOfKey(*r, key) == nullptr) {
      std::string names;
      for (const RuleParam& q : r->params) absl::StrAppend(&names, names.empty() ? "" : ", ", q.name);
      return absl::InvalidArgumentError(absl::StrCat(
          what, ".", key, ": not a param of ", r->types.front(), " (want ", names, ")"));
    }
  }
  for (const RuleParam& p : r->params) {
    if (p.kind == RuleParam::Kind::kPair) {
      for (int k = 0; k < 2; ++k) {
        const std::string key = absl::StrCat(p.name, "[", k, "]");
        auto it = params.find(key);
        out.params[key] = it != params.end() ? it->second
                          : k == 0          ? p.default_value
                                            : p.second_default;
      }
      continue;
    }
    auto it = params.find(p.name);
    out.params[p.name] = it != params.end() ? it->second : p.default_value;
  }
  RETURN_IF_ERROR(ValidateTensorRule(out, what));
  return out;
}

absl::Status ValidateTensorRule(const TensorRule& rule, absl::string_view what) {
  if (!rule.active()) return absl::OkStatus();
  const RuleInfo* r = FindTensorRule(rule.name);
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": unknown rule for whole tensors \"", rule.name, "\" (want ",
        TensorRuleNames(), ")"));
  }
  size_t expected = 0;
  for (const RuleParam& p : r->params) {
    const bool pair = p.kind == RuleParam::Kind::kPair;
    expected += pair ? 2 : 1;
    for (int k = 0; k < (pair ? 2 : 1); ++k) {
      const double v = rule.Param(pair ? absl::StrCat(p.name, "[", k, "]") : p.name);
      if (std::isnan(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ".", p.name, ": missing (rule ", r->name, " takes ", p.RangeText(), ")"));
      }
      RETURN_IF_ERROR(CheckParamValue(p, v, what, r->name));
    }
  }
  if (rule.params.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rule ", r->name, " has ", expected, " param values, this one ",
        rule.params.size()));
  }
  if (r->check == nullptr) return absl::OkStatus();
  return r->check([&](absl::string_view name) { return rule.Param(name); }, what);
}

TensorSlotPlace PlaceTensorSlot(const TensorSlot& slot, const TensorRule& rule,
                                const std::vector<int64_t>& shape) {
  TensorSlotPlace out;
  out.slot = slot.slot;
  const bool matrix = shape.size() >= 2;
  if ((slot.applies == TensorSlot::Applies::kVectors && matrix) ||
      (slot.applies == TensorSlot::Applies::kMatrices && !matrix)) {
    return out;
  }
  if (!slot.unless_none.empty()) {
    const RuleInfo* r = FindTensorRule(rule.name);
    const RuleParam* p = r != nullptr ? r->FindParam(slot.unless_none) : nullptr;
    if (p != nullptr && p->default_is_none && rule.Param(p->name) == p->default_value) {
      return out;
    }
  }
  uint64_t numel = 1, batch = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    numel *= static_cast<uint64_t>(shape[k]);
    if (k + 2 < shape.size()) batch *= static_cast<uint64_t>(shape[k]);
  }
  const uint64_t rows = matrix ? static_cast<uint64_t>(shape[shape.size() - 2]) : 0;
  const uint64_t cols = matrix ? static_cast<uint64_t>(shape.back()) : 0;
  switch (slot.extent) {
    case TensorSlot::Extent::kElements:
      out.count = numel;
      break;
    case TensorSlot::Extent::kRows:
      out.count = batch * rows;
      break;
    case TensorSlot::Extent::kColumns:
      out.offset = batch * rows;
      out.count = batch * cols;
      break;
  }
  return out;
}

std::string DescribeTensorRule(const TensorRule& rule) {
  const RuleInfo* r = FindTensorRule(rule.name);
  if (r == nullptr) return "none";
  std::string out = r->types.front();
  for (const RuleParam& p : r->params) {
    std::string value;
    switch (p.kind) {
      case RuleParam::Kind::kBool:
        value = rule.Param(p.name) != 0 ? "true" : "false";
        break;
      case RuleParam::Kind::kChoice:
        value = p.choices[static_cast<size_t>(rule.Param(p.name))];
        break;
      case RuleParam::Kind::kPair:
        value = absl::StrCat("[", rule.Param(p.name + "[0]"), ", ",
                             rule.Param(p.name + "[1]"), "]");
        break;
      case RuleParam::Kind::kNumber:
        value = p.default_is_none && rule.Param(p.name) == p.default_value
                    ? "none"
                    : absl::StrCat(rule.Param(p.name));
        break;
    }
    absl::StrAppend(&out, out.size() == r->types.front().size() ? " " : ", ", p.name, " ", value);
  }
  return out;
}

}  // namespace zeroshard
