// The config's "optimizer" section (common/config_optimizer.h): every
// element-wise rule by its entry in the registry of
// common/optimizer_rules.h (its types, params, fixed keywords and keywords
// with no effect), and the types that give tensor classes their rules
// (Adafactor, DeepSpeed's Muon).
#include "common/config_optimizer.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/optimizer_rules.h"
#include "common/rule_params_json.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace config_internal {
namespace {

using nlohmann::json;

// A rule of the registry (common/optimizer_rules.h) from its params: each
// as its description bounds it (the common ones, lr, betas, eps and
// weight_decay, also "auto"), the fixed ones at their value, the ones with
// no effect named; a type with a mode switch (DeepSpeed's "Adam" and its
// adam_w_mode) first picks its rule. `type` is the type as written. Returns
// whether lr was given.
absl::StatusOr<bool> ParseRegisteredRule(Section& s, const RuleInfo* rule,
                                         absl::string_view type,
                                         OptimizerConfig* o) {
  ASSIGN_OR_RETURN(Section p, s.Child("params"));
  if (!rule->mode_param.empty()) {
    bool on = true;
    RETURN_IF_ERROR(p.Bool(rule->mode_param, &on));
    if (on) rule = FindRule(rule->mode_rule);
  }
  std::map<std::string, double> given;
  for (const RuleParam& param : rule->params) {
    const json* v = p.Get(param.name);
    if (v == nullptr) continue;
    const bool common = param.common_field();
    if (param.kind == RuleParam::Kind::kBool) {
      bool b = false;
      RETURN_IF_ERROR(p.Bool(param.name, &b));
      given[param.name] = b ? 1 : 0;
      continue;
    }
    if (common && IsAuto(*v)) continue;
    if (!ReadRuleParamJson(param, *v, &given)) {
      return p.Bad(param.name, *v,
                   absl::StrCat(param.RangeText(), common ? " or \"auto\"" : ""));
    }
  }
  const RuleParam* lr = rule->FindParam("lr");
  if (lr != nullptr && std::isnan(lr->default_value) && !given.count("lr")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"optimizer.params.lr\" is required by type \"",
        type, "\" (", rule->description, ")"));
  }
  for (const FixedParam& f : rule->fixed) {
    const json* v = p.Get(f.name);
    if (v == nullptr) continue;
    const bool same = f.is_bool ? v->is_boolean() && (v->get<bool>() ? 1.0 : 0.0) == f.value
                                : v->is_number() && v->get<double>() == f.value;
    if (!same) {
      const std::string value = f.is_bool ? (f.value != 0 ? "true" : "false")
                                          : absl::StrCat(f.value);
      return p.Bad(f.name, *v, absl::StrCat(value, " (", f.why, ")"));
    }
  }
  for (const std::string& key : rule->no_effect) p.NoEffect(key);
  p.Finish();
  s.Finish();
  ASSIGN_OR_RETURN(*o, MakeRuleConfig(*rule, given, *o));
  return given.count("lr") != 0;
}

// DeepSpeed 0.19's "Muon" (MuonWithAuxAdam): Muon on the hidden matrices
// (lr, or muon_lr in its place; momentum; weight_decay), AdamW on every
// other tensor (lr, or adam_lr in its place; betas; eps; weight_decay),
// each with MuonWithAuxAdam's defaults (Muon: lr 0.02, momentum 0.95,
// weight decay 0, Nesterov; AdamW: lr 3e-4, betas (0.9, 0.95), eps 1e-10,
// weight decay 0). Returns whether the AdamW lr (the schedule's peak, which
// Muon's lr follows in proportion) was given.
absl::StatusOr<bool> ParseDeepSpeedMuon(Section& s, OptimizerConfig* o,
                                        ClassRules* rules) {
  ASSIGN_OR_RETURN(Section p, s.Child("params"));
  ASSIGN_OR_RETURN(std::optional<double> lr, p.DoubleOrAuto("lr", 1e-30, 1e6, true));
  ASSIGN_OR_RETURN(std::optional<double> muon_lr,
                   p.DoubleOrAuto("muon_lr", 1e-30, 1e6, false));
  ASSIGN_OR_RETURN(std::optional<double> adam_lr,
                   p.DoubleOrAuto("adam_lr", 1e-30, 1e6, false));
  std::map<std::string, double> muon = {{"lr", muon_lr.value_or(lr.value_or(0.02))},
                                        {"weight_decay", 0}};
  if (const json* m = p.Get("momentum")) {
    if (!m->is_number() || !(m->get<double>() >= 0) || !(m->get<double>() < 1)) {
      return p.Bad("momentum", *m, "a number in [0, 1)");
    }
    muon["momentum"] = m->get<double>();
  }
  RETURN_IF_ERROR(p.Double("weight_decay", 0, 1e6, &muon["weight_decay"], true));
  if (const json* ns = p.Get("ns_method")) {
    if (!ns->is_string()) return p.Bad("ns_method", *ns, "a string");
    // DeepSpeed's "gram" form and the published quintic iteration
    // orthogonalize alike; the servers run the published one.
    p.NoEffect("ns_method");
  }
  o->kind = OptimizerKind::kAdamW;
  o->lr = adam_lr.value_or(lr.value_or(3e-4));
  o->beta1 = 0.9;
  o->beta2 = 0.95;
  o->eps = 1e-10;
  o->weight_decay = muon["weight_decay"];
  if (const json* betas = p.Get("betas"); betas != nullptr && !IsAuto(*betas)) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
        !(*betas)[1].is_number() || !((*betas)[0].get<double>() >= 0) ||
        !((*betas)[0].get<double>() < 1) || !((*betas)[1].get<double>() >= 0) ||
        !((*betas)[1].get<double>() < 1)) {
      return p.Bad("betas", *betas, "[beta1, beta2], two numbers in [0, 1)");
    }
    o->beta1 = (*betas)[0].get<double>();
    o->beta2 = (*betas)[1].get<double>();
  }
  RETURN_IF_ERROR(p.Double("eps", 1e-30, 1, &o->eps, true));
  ASSIGN_OR_RETURN(TensorRule rule, MakeTensorRule("muon", muon, "optimizer.params"));
  p.Finish();
  s.Finish();
  rules->matrices = rule;
  return adam_lr.has_value() || lr.has_value();
}

// A rule for whole tensors as optimizer.type, every class's (Adafactor):
// AdamW's slots hold its state; its lr, when it has one, is the schedule's
// peak, which it follows in proportion. Returns whether it has one.
absl::StatusOr<bool> ParseEveryClassRule(Section& s, const RuleInfo& rule,
                                         OptimizerConfig* o, ClassRules* rules) {
  const json* params = s.Get("params");
  ASSIGN_OR_RETURN(TensorRule r,
                   ParseTensorRule(rule.name, params != nullptr ? params->dump() : "{}",
                                   "optimizer.params"));
  s.Finish();
  o->kind = OptimizerKind::kAdamW;
  o->weight_decay = 0;
  const RuleParam* lr = rule.FindParam("lr");
  rules->every_class = r;
  if (lr == nullptr || (lr->default_is_none && r.Param("lr") == lr->default_value)) {
    return false;
  }
  o->lr = r.Param("lr");
  return true;
}

}  // namespace

// Returns whether params.lr was given explicitly. A type of a rule for
// whole tensors (common/optimizer_rules.h) sets `rules`: DeepSpeed's "Muon"
// the matrices' rule, with AdamW on the rest; any other ("Adafactor") every
// class's rule (ApplyClassRules), over AdamW's slots. The types are matched
// by name, never by their place in a list.
absl::StatusOr<bool> ParseOptimizer(Section& root, OptimizerConfig* o,
                                    ClassRules* rules) {
  ASSIGN_OR_RETURN(Section s, root.Child("optimizer"));
  std::vector<std::string> types;
  for (const RuleInfo& r : RegisteredRules()) {
    types.insert(types.end(), r.types.begin(), r.types.end());
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> given, s.ChoiceName("type", types));
  const std::string type = given.value_or("AdamW");
  const RuleInfo* rule = FindRuleByType(type);
  if (!rule->element_wise()) {
    // DeepSpeed's MuonWithAuxAdam form: a rule for the matrices alone.
    if (!rule->matrices_only.empty()) return ParseDeepSpeedMuon(s, o, rules);
    return ParseEveryClassRule(s, *rule, o, rules);
  }
  return ParseRegisteredRule(s, rule, type, o);
}

void ApplyClassRules(const ClassRules& rules, const json& doc, TrainingConfig* c,
                     std::vector<std::string>* warnings) {
  if (rules.every_class.has_value()) {
    GiveUnruledClasses(*rules.every_class, &c->param_groups);
    const RuleInfo* info = FindTensorRule(rules.every_class->name);
    const RuleParam* lr = info->FindParam("lr");
    const bool own_step = lr != nullptr && lr->default_is_none &&
                          rules.every_class->Param("lr") == lr->default_value;
    if (own_step && doc.contains("scheduler") && !doc["scheduler"].is_null()) {
      warnings->push_back(absl::StrCat(
          "config key \"scheduler\" has no effect under optimizer.type \"",
          info->types.front(), "\" with relative_step (its step size is "
          "min(1e-2, 1/sqrt(t)))"));
    }
  }
  if (rules.matrices.has_value()) {
    // The matrices' rule unless zeroshard.param_groups gave them one.
    GroupSettings& m = c->param_groups.classes[static_cast<int>(TensorClass::kMatrix)];
    c->param_groups.single = false;
    if (!m.rule.active()) m.rule = *rules.matrices;
  }
}

}  // namespace config_internal
}  // namespace zeroshard
