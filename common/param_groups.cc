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

}  // namespace

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
      if (k.key() != "weight_decay" && k.key() != "lr_scale") {
        return absl::InvalidArgumentError(absl::StrCat(
            "config key \"", path, ".", k.key(),
            "\": unknown (want weight_decay or lr_scale)"));
      }
    }
    GroupSettings& g = out.classes[static_cast<int>(*found)];
    if (obj.contains("weight_decay") && !obj["weight_decay"].is_null()) {
      RETURN_IF_ERROR(ReadSetting(obj, path, "weight_decay", &g.weight_decay));
      g.optimizer_weight_decay = false;
    }
    RETURN_IF_ERROR(ReadSetting(obj, path, "lr_scale", &g.lr_scale));
  }
  return out;
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
      set.push_back({r, g.weight_decay, g.lr_scale});
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
