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
    auto in = [&](const json& x) {
      return x.is_number() && std::isfinite(x.get<double>()) &&
             param.InRange(x.get<double>());
    };
    const std::string want = absl::StrCat(param.RangeText(), common ? " or \"auto\"" : "");
    if (param.kind == RuleParam::Kind::kPair) {
      if (!v->is_array() || v->size() != 2 || !in((*v)[0]) || !in((*v)[1])) {
        return p.Bad(param.name, *v, want);
      }
      given[param.name + "[0]"] = (*v)[0].get<double>();
      given[param.name + "[1]"] = (*v)[1].get<double>();
      continue;
    }
    if (!in(*v)) return p.Bad(param.name, *v, want);
    given[param.name] = v->get<double>();
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
  TensorRule muon;
  muon.kind = TensorRuleKind::kMuon;
  muon.lr = muon_lr.value_or(lr.value_or(0.02));
  muon.momentum = 0.95;
  muon.nesterov = true;
  muon.weight_decay = 0;
  RETURN_IF_ERROR(p.Double("momentum", 0, 1, &muon.momentum));
  if (muon.momentum >= 1) {
    return p.Bad("momentum", *p.Get("momentum"), "a number in [0, 1)");
  }
  RETURN_IF_ERROR(p.Double("weight_decay", 0, 1e6, &muon.weight_decay, true));
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
  o->weight_decay = muon.weight_decay;
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
  RETURN_IF_ERROR(ValidateTensorRule(muon, "optimizer.params (Muon)"));
  p.Finish();
  s.Finish();
  rules->muon = muon;
  return adam_lr.has_value() || lr.has_value();
}

// optimizer.type "Adafactor" (GiveUnruledClasses); a scheduler beside its
// relative step does nothing, and is said to.
void ApplyAdafactorToEveryClass(const AdafactorOptions& a, const json& doc,
                                TrainingConfig* c,
                                std::vector<std::string>* warnings) {
  GiveUnruledClasses(TensorRule{.kind = TensorRuleKind::kAdafactor, .adafactor = a},
                     &c->param_groups);
  if (a.relative_step && doc.contains("scheduler") && !doc["scheduler"].is_null()) {
    warnings->push_back(
        "config key \"scheduler\" has no effect under optimizer.type \"Adafactor\" "
        "with relative_step (its step size is min(1e-2, 1/sqrt(t)))");
  }
}

}  // namespace

// Returns whether params.lr was given explicitly. Type "Adafactor" (Hugging
// Face's name and params) sets `rules->adafactor`: every tensor class's
// group gets it as its rule (ApplyClassRules), over AdamW's slots; type
// "Muon" (DeepSpeed's) sets `rules->muon`, the matrices' rule. The types
// are matched by name, never by their place in a list.
absl::StatusOr<bool> ParseOptimizer(Section& root, OptimizerConfig* o,
                                    ClassRules* rules) {
  ASSIGN_OR_RETURN(Section s, root.Child("optimizer"));
  std::vector<std::string> types;
  for (const RuleInfo& r : RegisteredRules()) {
    types.insert(types.end(), r.types.begin(), r.types.end());
  }
  // The rules for whole tensors, given to parameter classes.
  types.push_back("Adafactor");
  types.push_back("Muon");
  ASSIGN_OR_RETURN(const std::optional<std::string> given, s.ChoiceName("type", types));
  const std::string type = given.value_or("AdamW");
  if (type == "Muon") return ParseDeepSpeedMuon(s, o, rules);
  if (type == "Adafactor") {
    AdafactorOptions a;
    if (const json* params = s.Get("params")) {
      ASSIGN_OR_RETURN(a, ParseAdafactorParams(params->dump(), "optimizer.params"));
    }
    s.Finish();
    o->kind = OptimizerKind::kAdamW;
    o->weight_decay = 0;
    rules->adafactor = a;
    if (a.relative_step) return false;
    o->lr = a.lr;  // the schedule's peak: the rule's lr follows lr_t / lr
    return true;
  }
  return ParseRegisteredRule(s, FindRuleByType(type), type, o);
}

void ApplyClassRules(const ClassRules& rules, const json& doc, TrainingConfig* c,
                     std::vector<std::string>* warnings) {
  if (rules.adafactor.has_value()) {
    ApplyAdafactorToEveryClass(*rules.adafactor, doc, c, warnings);
  }
  if (rules.muon.has_value()) {
    // The matrices' rule unless zeroshard.param_groups gave them one.
    GroupSettings& m = c->param_groups.classes[static_cast<int>(TensorClass::kMatrix)];
    c->param_groups.single = false;
    if (!m.rule.active()) m.rule = *rules.muon;
  }
}

}  // namespace config_internal
}  // namespace zeroshard
