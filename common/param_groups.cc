#include "common/param_groups.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/rule_params_json.h"
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

// A rule's "params" object (`key` names it): each param as the entry
// describes it; an unknown one refused naming those it takes.
absl::StatusOr<TensorRule> ReadTensorRuleParams(const RuleInfo& rule, const json* v,
                                                const std::string& key) {
  std::map<std::string, double> given;
  if (v != nullptr) {
    if (!v->is_object()) return Bad(key, *v, "an object");
    for (auto k = v->begin(); k != v->end(); ++k) {
      const RuleParam* p = rule.FindParam(k.key());
      const std::string at = absl::StrCat(key, ".", k.key());
      if (p == nullptr) {
        std::vector<std::string> names;
        for (const RuleParam& q : rule.params) names.push_back(q.name);
        return absl::InvalidArgumentError(absl::StrCat(
            "config key \"", at, "\": unknown (", rule.types.front(), " takes ",
            absl::StrJoin(names, ", "), ")"));
      }
      if (k->is_null() && !p->default_is_none) continue;  // null: the default
      if (!ReadRuleParamJson(*p, *k, &given)) return Bad(at, *k, p->RangeText());
    }
  }
  return MakeTensorRule(rule.name, given, key);
}

// The value of a class's "optimizer" key (`path` is the class's key).
absl::Status ReadTensorRule(const json& v, const std::string& path,
                            TensorClass c, const json& group, TensorRule* out) {
  const std::string key = absl::StrCat(path, ".optimizer");
  const std::string types = TensorRuleTypes();
  if (!v.is_object()) {
    return Bad(key, v, absl::StrCat("an object {\"type\": ", types, ", \"params\": {...}}"));
  }
  for (auto k = v.begin(); k != v.end(); ++k) {
    if (k.key() != "type" && k.key() != "params") {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", key, ".", k.key(), "\": unknown (want type or params)"));
    }
  }
  auto type = v.find("type");
  if (type == v.end() || !type->is_string()) {
    return Bad(key + ".type", type == v.end() ? json() : *type, types);
  }
  const std::string name = type->get<std::string>();
  const RuleInfo* rule = FindRuleByType(name);
  if (rule == nullptr || rule->element_wise()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, ".type\": unknown rule \"", name,
        "\" for a group (want ", types, "; the element-wise rule of "
        "every other tensor is optimizer.type)"));
  }
  if (!rule->matrices_only.empty() && c != TensorClass::kMatrix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, "\": ", rule->matrices_only, "; not ",
        TensorClassName(c)));
  }
  for (const char* own : {"weight_decay", "lr_scale"}) {
    if (group.contains(own)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key \"", path, ".", own, "\": a group with its own optimizer "
          "takes its hyperparameters from ", key, ".params"));
    }
  }
  auto params = v.find("params");
  ASSIGN_OR_RETURN(*out, ReadTensorRuleParams(*rule, params != v.end() ? &*params : nullptr,
                                              key + ".params"));
  return absl::OkStatus();
}

}  // namespace

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

absl::StatusOr<TensorRule> ParseTensorRule(absl::string_view name,
                                           absl::string_view params_json,
                                           absl::string_view key) {
  const RuleInfo* rule = FindTensorRule(name);
  if (rule == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, "\": no rule for whole tensors \"", name, "\""));
  }
  json v;
  try {
    v = json::parse(params_json.data(), params_json.data() + params_json.size());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"", key, "\": not valid JSON: ", e.what()));
  }
  return ReadTensorRuleParams(*rule, &v, std::string(key));
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
    if (g.rule.active()) {
      parts.push_back(absl::StrCat(TensorClassName(static_cast<TensorClass>(c)),
                                   ": ", DescribeTensorRule(g.rule)));
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
