#include "common/param_groups.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

using nlohmann::json;

constexpr char kKey[] = "zeroshard.param_groups";
constexpr double kMaxSetting = 1e6;

absl::Status Bad(const std::string& key, const json& v, absl::string_view want) {
  std::string shown = v.dump();
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  return absl::InvalidArgumentError(absl::StrCat(
      "config key \"", key, "\": expected ", want, ", got ", shown));
}

absl::Status ReadSetting(const json& obj, const std::string& path,
                         const char* name, double* out) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  const std::string key = absl::StrCat(path, ".", name);
  if (!it->is_number()) return Bad(key, *it, "a number in [0, 1e6]");
  const double d = it->get<double>();
  if (!std::isfinite(d) || d < 0 || d > kMaxSetting) {
    return Bad(key, *it, "a number in [0, 1e6]");
  }
  *out = d;
  return absl::OkStatus();
}

// Adafactor's "params" object (`key` names it) over `o`.
absl::Status ReadAdafactorParams(const json& v, const std::string& key,
                                 AdafactorOptions* o) {
  if (!v.is_object()) return Bad(key, v, "an object");
  for (auto k = v.begin(); k != v.end(); ++k) {
    const std::string& n = k.key();
    const std::string at = absl::StrCat(key, ".", n);
    if (k->is_null()) {  // Hugging Face's None: the default
      if (n == "beta1") o->beta1 = -1;
      if (n == "lr") o->lr = 0;
      if (n == "beta1" || n == "lr") continue;
    }
    if (n == "scale_parameter" || n == "relative_step" || n == "warmup_init") {
      if (!k->is_boolean()) return Bad(at, *k, "true or false");
      (n == "scale_parameter" ? o->scale_parameter
       : n == "relative_step" ? o->relative_step
                              : o->warmup_init) = k->get<bool>();
      continue;
    }
    if (n == "eps") {
      if (!k->is_array() || k->size() != 2 || !(*k)[0].is_number() ||
          !(*k)[1].is_number()) {
        return Bad(at, *k, "[eps1, eps2], two numbers in [0, 1e6]");
      }
      o->eps1 = (*k)[0].get<double>();
      o->eps2 = (*k)[1].get<double>();
      continue;
    }
    double* field = n == "lr"               ? &o->lr
                    : n == "clip_threshold" ? &o->clip_threshold
                    : n == "decay_rate"     ? &o->decay_rate
                    : n == "beta1"          ? &o->beta1
                    : n == "weight_decay"   ? &o->weight_decay
                                            : nullptr;
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", at,
          "\": unknown (want lr, eps, clip_threshold, decay_rate, beta1, "
          "weight_decay, scale_parameter, relative_step or warmup_init)"));
    }
    if (!k->is_number()) return Bad(at, *k, "a number");
    *field = k->get<double>();
  }
  return ValidateAdafactorOptions(*o, key);
}

// The value of a class's "optimizer" key (`path` is the class's key).
absl::Status ReadTensorRule(const json& v, const std::string& path,
                            TensorClass c, const json& group, TensorRule* out) {
  const std::string key = absl::StrCat(path, ".optimizer");
  if (!v.is_object()) {
    return Bad(key, v,
               "an object {\"type\": \"Muon\" or \"Adafactor\", \"params\": {...}}");
  }
  for (auto k = v.begin(); k != v.end(); ++k) {
    if (k.key() != "type" && k.key() != "params") {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", key, ".", k.key(), "\": unknown (want type or params)"));
    }
  }
  auto type = v.find("type");
  if (type == v.end() || !type->is_string()) {
    return Bad(key + ".type", type == v.end() ? json() : *type,
               "\"Muon\" or \"Adafactor\"");
  }
  const std::string name = type->get<std::string>();
  const bool adafactor = name == "Adafactor" || name == "adafactor";
  if (name != "Muon" && name != "muon" && !adafactor) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, ".type\": unknown rule \"", name,
        "\" for a group (want Muon or Adafactor; the element-wise rule of "
        "every other tensor is optimizer.type)"));
  }
  if (!adafactor && c != TensorClass::kMatrix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, "\": Muon is for 2-D hidden matrices (the class "
        "matrices); ", TensorClassName(c),
        " stay with optimizer.type, as Muon's authors prescribe"));
  }
  for (const char* own : {"weight_decay", "lr_scale"}) {
    if (group.contains(own)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", path, ".", own, "\": a group with its own optimizer "
          "takes its hyperparameters from ", key, ".params"));
    }
  }
  TensorRule r;
  if (adafactor) {
    r.kind = TensorRuleKind::kAdafactor;
    if (auto params = v.find("params"); params != v.end()) {
      RETURN_IF_ERROR(ReadAdafactorParams(*params, key + ".params", &r.adafactor));
    }
    *out = r;
    return absl::OkStatus();
  }
  r.kind = TensorRuleKind::kMuon;
  if (auto params = v.find("params"); params != v.end()) {
    const std::string pkey = key + ".params";
    if (!params->is_object()) return Bad(pkey, *params, "an object");
    for (auto k = params->begin(); k != params->end(); ++k) {
      const std::string& n = k.key();
      const std::string at = absl::StrCat(pkey, ".", n);
      if (n == "nesterov") {
        if (!k->is_boolean()) return Bad(at, *k, "true or false");
        r.nesterov = k->get<bool>();
        continue;
      }
      if (n == "ns_precision") {
        if (!k->is_string() ||
            (k->get<std::string>() != "fp32" && k->get<std::string>() != "bf16")) {
          return Bad(at, *k, "\"fp32\" or \"bf16\"");
        }
        r.bf16_products = k->get<std::string>() == "bf16";
        continue;
      }
      double* field = n == "lr"             ? &r.lr
                      : n == "momentum"     ? &r.momentum
                      : n == "weight_decay" ? &r.weight_decay
                                            : nullptr;
      if (field == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config key \"", at,
            "\": unknown (want lr, momentum, nesterov, weight_decay or "
            "ns_precision)"));
      }
      const char* want = n == "lr"         ? "a number in (0, 1e6]"
                         : n == "momentum" ? "a number in [0, 1)"
                                           : "a number in [0, 1e6]";
      if (!k->is_number()) return Bad(at, *k, want);
      const double d = k->get<double>();
      TensorRule probe = r;
      *(n == "lr" ? &probe.lr : n == "momentum" ? &probe.momentum
                                                : &probe.weight_decay) = d;
      if (!ValidateTensorRule(probe, pkey).ok()) return Bad(at, *k, want);
      *field = d;
    }
  }
  RETURN_IF_ERROR(ValidateTensorRule(r, key + ".params"));
  *out = r;
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTensorRule(const TensorRule& rule, absl::string_view what) {
  if (!rule.active()) return absl::OkStatus();
  if (rule.kind == TensorRuleKind::kAdafactor) {
    absl::Status s = ValidateAdafactorOptions(rule.adafactor);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  auto bad = [&](const char* name, double v, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".", name, " is ", v, "; want ", want));
  };
  if (!std::isfinite(rule.lr) || rule.lr <= 0 || rule.lr > kMaxSetting) {
    return bad("lr", rule.lr, "a number in (0, 1e6]");
  }
  if (!std::isfinite(rule.momentum) || rule.momentum < 0 ||
      rule.momentum >= 1) {
    return bad("momentum", rule.momentum, "a number in [0, 1)");
  }
  if (!std::isfinite(rule.weight_decay) || rule.weight_decay < 0 ||
      rule.weight_decay > kMaxSetting) {
    return bad("weight_decay", rule.weight_decay, "a number in [0, 1e6]");
  }
  return absl::OkStatus();
}

void GiveUnruledClasses(const TensorRule& rule, ParamGroups* groups) {
  groups->single = false;
  for (GroupSettings& g : groups->classes) {
    if (!g.rule.active()) g.rule = rule;
  }
}

void MarkWholeTensors(const ParamGroups& groups, ModelManifest* manifest) {
  if (groups.single) return;
  for (UnitSpec& u : manifest->units) {
    for (TensorSpec& t : u.tensors) {
      if (groups.classes[static_cast<int>(t.param_class)].rule.active()) {
        t.keep_whole = true;
      }
    }
  }
}

absl::string_view TensorClassName(TensorClass c) {
  switch (c) {
    case TensorClass::kMatrix: return "matrices";
    case TensorClass::kEmbedding: return "embeddings";
    case TensorClass::kBias: return "biases";
    case TensorClass::kNorm: return "norms";
  }
  return "?";
}

std::optional<TensorClass> TensorClassFromName(absl::string_view name) {
  for (int c = 0; c < kNumTensorClasses; ++c) {
    if (name == TensorClassName(static_cast<TensorClass>(c))) {
      return static_cast<TensorClass>(c);
    }
  }
  return std::nullopt;
}

absl::StatusOr<ParamGroups> ParseParamGroups(absl::string_view json_text) {
  json v;
  try {
    v = json::parse(json_text.data(), json_text.data() + json_text.size());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key \"", kKey, "\": not valid JSON: ", e.what()));
  }
  ParamGroups out;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "single") return ParamGroups::Single();
    if (s == "default") return out;
  }
  const char* want =
      "\"single\", \"default\" or an object of classes (matrices, "
      "embeddings, biases, norms)";
  if (!v.is_object()) return Bad(kKey, v, want);
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::optional<TensorClass> found = TensorClassFromName(it.key());
    const std::string path = absl::StrCat(kKey, ".", it.key());
    if (!found.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", path,
          "\": unknown tensor class (want matrices, embeddings, biases or "
          "norms)"));
    }
    const json& obj = it.value();
    if (!obj.is_object()) {
      return Bad(path, obj, "an object with weight_decay and/or lr_scale");
    }
    for (auto k = obj.begin(); k != obj.end(); ++k) {
      if (k.key() != "weight_decay" && k.key() != "lr_scale" &&
          k.key() != "optimizer") {
        return absl::InvalidArgumentError(absl::StrCat(
            "config key \"", path, ".", k.key(),
            "\": unknown (want weight_decay, lr_scale or optimizer)"));
      }
    }
    GroupSettings& g = out.classes[static_cast<int>(*found)];
    if (auto rule = obj.find("optimizer"); rule != obj.end()) {
      RETURN_IF_ERROR(ReadTensorRule(*rule, path, *found, obj, &g.rule));
    }
    if (obj.contains("weight_decay") && !obj["weight_decay"].is_null()) {
      RETURN_IF_ERROR(ReadSetting(obj, path, "weight_decay", &g.weight_decay));
      g.optimizer_weight_decay = false;
    }
    RETURN_IF_ERROR(ReadSetting(obj, path, "lr_scale", &g.lr_scale));
  }
  return out;
}

absl::StatusOr<AdafactorOptions> ParseAdafactorParams(
    absl::string_view json_text, absl::string_view key) {
  json v;
  try {
    v = json::parse(json_text.data(), json_text.data() + json_text.size());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, "\": not valid JSON: ", e.what()));
  }
  AdafactorOptions o;
  RETURN_IF_ERROR(ReadAdafactorParams(v, std::string(key), &o));
  return o;
}

std::string DescribeParamGroups(const ParamGroups& groups,
                                double optimizer_weight_decay) {
  if (groups.single) {
    return absl::StrCat("single (weight_decay ", optimizer_weight_decay,
                        " on every tensor)");
  }
  std::vector<std::string> parts;
  for (int c = 0; c < kNumTensorClasses; ++c) {
    const GroupSettings& g = groups.classes[c];
    if (g.rule.kind == TensorRuleKind::kAdafactor) {
      const AdafactorOptions& a = g.rule.adafactor;
      parts.push_back(absl::StrCat(
          TensorClassName(static_cast<TensorClass>(c)), ": Adafactor ",
          a.relative_step ? (a.warmup_init ? "relative step with warmup"
                                           : "relative step")
                          : absl::StrCat("lr ", a.lr),
          a.first_moment() ? absl::StrCat(", beta1 ", a.beta1) : "",
          ", weight_decay ", a.weight_decay));
      continue;
    }
    if (g.rule.active()) {
      parts.push_back(absl::StrCat(
          TensorClassName(static_cast<TensorClass>(c)), ": Muon lr ",
          g.rule.lr, ", momentum ", g.rule.momentum,
          g.rule.nesterov ? ", Nesterov" : "", ", weight_decay ",
          g.rule.weight_decay,
          g.rule.bf16_products ? ", BF16 Newton-Schulz" : ""));
      continue;
    }
    parts.push_back(absl::StrCat(
        TensorClassName(static_cast<TensorClass>(c)), ": weight_decay ",
        g.optimizer_weight_decay ? optimizer_weight_decay : g.weight_decay,
        ", lr_scale ", g.lr_scale));
  }
  return absl::StrJoin(parts, "; ");
}

std::vector<ResolvedGroup> ResolveParamGroups(const FlatLayout& layout,
                                              const ParamGroups& groups,
                                              double optimizer_weight_decay) {
  std::vector<ResolvedGroup> out;
  if (groups.single) return out;
  std::array<ResolvedGroup, kNumTensorClasses> by_class;
  for (int c = 0; c < kNumTensorClasses; ++c) {
    const GroupSettings& g = groups.classes[c];
    by_class[c].name = std::string(TensorClassName(static_cast<TensorClass>(c)));
    by_class[c].weight_decay =
        g.optimizer_weight_decay ? optimizer_weight_decay : g.weight_decay;
    by_class[c].lr_scale = g.lr_scale;
    by_class[c].rule = g.rule;
    if (g.rule.active()) {  // the rule's own decay; its lr is its own
      by_class[c].weight_decay = g.rule.decay();
      by_class[c].lr_scale = 1;
    }
  }
  for (const TensorInfo& t : layout.tensors()) {
    if (t.numel == 0) continue;
    ResolvedGroup& r =
        by_class[static_cast<int>(t.param_class)];
    const FlatRange range{t.offset, t.offset + t.numel};
    if (!r.ranges.empty() && r.ranges.back().end == range.begin) {
      r.ranges.back().end = range.end;
    } else {
      r.ranges.push_back(range);
    }
    r.elems += t.numel;
  }
  for (ResolvedGroup& r : by_class) {
    if (!r.ranges.empty()) out.push_back(std::move(r));
  }
  return out;
}

std::vector<GroupSpan> GroupSpans(const std::vector<ResolvedGroup>& groups,
                                  uint64_t total_elems,
                                  double optimizer_weight_decay) {
  std::vector<GroupSpan> set;
  for (const ResolvedGroup& g : groups) {
    for (const FlatRange& r : g.ranges) {
      set.push_back({r, g.weight_decay, g.lr_scale, g.rule});
    }
  }
  std::sort(set.begin(), set.end(), [](const GroupSpan& a, const GroupSpan& b) {
    return a.range.begin < b.range.begin;
  });
  std::vector<GroupSpan> out;
  uint64_t at = 0;
  for (const GroupSpan& s : set) {
    if (at < s.range.begin) {
      out.push_back({{at, s.range.begin}, optimizer_weight_decay, 1.0});
    }
    out.push_back(s);
    at = s.range.end;
  }
  if (at < total_elems) {
    out.push_back({{at, total_elems}, optimizer_weight_decay, 1.0});
  }
  return out;
}

}  // namespace zeroshard
