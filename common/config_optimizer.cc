// The config's "optimizer" section (common/config_optimizer.h): the
// element-wise rules by name (the legacy kinds, and every type of the
// registry of common/optimizer_rules.h from its description), and the
// types that give tensor classes their rules (Adafactor, DeepSpeed's Muon).
#include "common/config_optimizer.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/optimizer_rules.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace config_internal {
namespace {

using nlohmann::json;

// bitsandbytes' AdamW8bit / Adam8bit (and their Paged names, the same
// rule: the servers' state is in host memory, where paging to it buys
// nothing) with their defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
// weight_decay 1e-2 (AdamW8bit) or 0. The switches bitsandbytes has for
// other algorithms must keep their defaults; min_8bit_size (its 32-bit
// state for small tensors) has no effect here: every element's state is
// 8-bit. The shared params (lr, betas, eps, weight_decay) are read after
// it by ParseOptimizer, as for AdamW.
absl::Status ParseEightBitSwitches(Section& p, bool adamw, OptimizerConfig* o) {
  o->kind = adamw ? OptimizerKind::kAdamW8bit : OptimizerKind::kAdam8bit;
  o->lr = 1e-3;
  o->beta1 = 0.9;
  o->beta2 = 0.999;
  o->eps = 1e-8;
  o->weight_decay = adamw ? 1e-2 : 0.0;
  auto must = [&](const char* key, const json& want, const char* why) -> absl::Status {
    const json* v = p.Get(key);
    if (v == nullptr || *v == want) return absl::OkStatus();
    return p.Bad(key, *v, why);
  };
  RETURN_IF_ERROR(must("amsgrad", false, "false (the 8-bit Adams keep no max of v)"));
  RETURN_IF_ERROR(must("block_wise", true, "true (the state is quantized in blocks of 2048)"));
  RETURN_IF_ERROR(must("percentile_clipping", 100,
                       "100 (clip the gradient with gradient_clipping instead)"));
  RETURN_IF_ERROR(must("optim_bits", 8, "8 for an 8-bit type (use \"AdamW\" for 32-bit state)"));
  RETURN_IF_ERROR(must("max_unorm", 0.0, "0 (no update-norm clipping)"));
  p.NoEffect("min_8bit_size");
  p.NoEffect("is_paged");
  p.NoEffect("args");
  return absl::OkStatus();
}

// A rule of the registry (common/optimizer_rules.h) from its params: each
// as its description bounds it, the fixed ones at their value, the ones
// with no effect named. Returns whether lr was given.
absl::StatusOr<bool> ParseRegisteredRule(Section& s, const RuleInfo& rule,
                                         OptimizerConfig* o) {
  ASSIGN_OR_RETURN(Section p, s.Child("params"));
  std::map<std::string, double> given;
  for (const RuleParam& param : rule.params) {
    if (param.kind == RuleParam::Kind::kBool) {
      if (p.Get(param.name) == nullptr) continue;
      bool b = false;
      RETURN_IF_ERROR(p.Bool(param.name, &b));
      given[param.name] = b ? 1 : 0;
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<double> v,
                     p.DoubleOrAuto(param.name, param.min, param.max,
                                    /*allow_auto=*/param.name == "lr"));
    if (!v.has_value()) continue;
    given[param.name] = *v;
  }
  const RuleParam* lr = rule.FindParam("lr");
  if (lr != nullptr && std::isnan(lr->default_value) && !given.count("lr")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"optimizer.params.lr\" is required by type \"",
        rule.types.front(), "\" (", rule.description, ")"));
  }
  for (const FixedParam& f : rule.fixed) {
    const json* v = p.Get(f.name);
    if (v == nullptr) continue;
    const bool same = v->is_boolean() ? (v->get<bool>() ? 1.0 : 0.0) == f.value
                                      : v->is_number() && v->get<double>() == f.value;
    if (!same) {
      return p.Bad(f.name, *v, absl::StrCat(f.value == 0 ? "false" : "true", " (", f.why, ")"));
    }
  }
  for (const std::string& key : rule.no_effect) p.NoEffect(key);
  p.Finish();
  s.Finish();
  ASSIGN_OR_RETURN(*o, MakeRuleConfig(rule, given, *o));
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
  std::vector<std::string> types = {"AdamW",     "Adam",     "Lion",
                                    "Adafactor", "AdamW8bit", "Adam8bit",
                                    "PagedAdamW8bit", "PagedAdam8bit", "Muon"};
  for (const RuleInfo& r : RegisteredRules()) {
    types.insert(types.end(), r.types.begin(), r.types.end());
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> given, s.ChoiceName("type", types));
  const std::string type = given.value_or("");  // "": AdamW
  if (const RuleInfo* rule = FindRuleByType(type)) {
    return ParseRegisteredRule(s, *rule, o);
  }
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
  ASSIGN_OR_RETURN(Section p, s.Child("params"));
  const bool lion = type == "Lion";
  if (absl::StrContains(type, "8bit")) {
    RETURN_IF_ERROR(ParseEightBitSwitches(
        p, type == "AdamW8bit" || type == "PagedAdamW8bit", o));
  } else if (lion) {
    // DeepSpeed's Lion and the paper's defaults: lr 1e-4, betas (0.9,
    // 0.99), no weight decay; eps and Adam's switches do nothing.
    o->kind = OptimizerKind::kLion;
    o->lr = 1e-4;
    o->beta1 = 0.9;
    o->beta2 = 0.99;
    o->weight_decay = 0.0;
    p.NoEffect("eps");
    p.NoEffect("adam_w_mode");
    p.NoEffect("torch_adam");
  } else {
    bool adam_w_mode = true;
    RETURN_IF_ERROR(p.Bool("adam_w_mode", &adam_w_mode));
    bool torch_adam = false;
    RETURN_IF_ERROR(p.Bool("torch_adam", &torch_adam));
    p.NoEffect("torch_adam");
    if (type == "AdamW" && !adam_w_mode) {
      return absl::InvalidArgumentError(
          "config key \"optimizer.params.adam_w_mode\": false contradicts type \"AdamW\"; "
          "use type \"Adam\" for L2 weight decay");
    }
    o->kind = (type == "Adam" && !adam_w_mode) ? OptimizerKind::kAdam : OptimizerKind::kAdamW;
    o->weight_decay = o->kind == OptimizerKind::kAdamW ? 0.01 : 0.0;
  }
  ASSIGN_OR_RETURN(std::optional<double> lr, p.DoubleOrAuto("lr", 1e-30, 1e6, true));
  if (lr.has_value()) o->lr = *lr;
  if (const json* betas = p.Get("betas"); betas != nullptr && !IsAuto(*betas)) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
        !(*betas)[1].is_number()) {
      return p.Bad("betas", *betas, "[beta1, beta2], two numbers in [0, 1)");
    }
    o->beta1 = (*betas)[0].get<double>();
    o->beta2 = (*betas)[1].get<double>();
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1)) {
      return p.Bad("betas", *betas, "[beta1, beta2], two numbers in [0, 1)");
    }
  }
  if (!lion) RETURN_IF_ERROR(p.Double("eps", 1e-30, 1, &o->eps, true));
  RETURN_IF_ERROR(p.Double("weight_decay", 0, 1e6, &o->weight_decay, true));
  p.Finish();
  s.Finish();
  return lr.has_value();
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
