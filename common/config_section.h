// The config parser's reader of one JSON object (common/config_json.cc):
// typed getters that name the key's full path in every error, record the
// keys they consumed, and leave the rest for the "unknown key" warning
// (with the nearest known key as a hint). Internal to the parser.
#ifndef ZEROSHARD_COMMON_CONFIG_SECTION_H_
#define ZEROSHARD_COMMON_CONFIG_SECTION_H_

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/edit_distance.h"
#include "common/enum_names.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace config_internal {

using nlohmann::json;

inline std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return s;
}

inline std::string Shown(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

inline bool IsAuto(const json& v) { return v.is_string() && Lower(v.get<std::string>()) == "auto"; }

// One JSON object at `path`; absent sections read as empty. Keys left
// unconsumed are collected in `unknown` and keys marked NoEffect in
// `no_effect` (full paths, quoted); ParseTrainingConfig turns both into one
// warning.
class Section {
 public:
  Section(const json* object, std::string path, std::vector<std::string>* unknown,
          std::vector<std::string>* no_effect = nullptr)
      : object_(object), path_(std::move(path)), warnings_(unknown), no_effect_(no_effect) {}

  std::string KeyPath(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }

  absl::Status Bad(absl::string_view key, const json& v, absl::string_view want) const {
    return absl::InvalidArgumentError(
        absl::StrCat("config key \"", KeyPath(key), "\": expected ", want, ", got ", Shown(v)));
  }

  // The value, or nullptr when absent (or null). Marks the key consumed.
  const json* Get(absl::string_view key) {
    known_.push_back(std::string(key));
    if (object_ == nullptr) return nullptr;
    auto it = object_->find(std::string(key));
    if (it == object_->end()) return nullptr;
    consumed_.push_back(std::string(key));
    return it->is_null() ? nullptr : &*it;
  }

  // Whether `key` is present with a value (does not consume it).
  bool Given(absl::string_view key) const {
    if (object_ == nullptr) return false;
    auto it = object_->find(std::string(key));
    return it != object_->end() && !it->is_null();
  }

  // Known key whose value we accept without using; checks it is a scalar.
  void Accept(absl::string_view key) { Get(key); }

  // Whether `key` holds "auto" (does not consume it).
  bool HoldsAuto(absl::string_view key) const {
    if (object_ == nullptr) return false;
    auto it = object_->find(std::string(key));
    return it != object_->end() && IsAuto(*it);
  }

  // Marks `key`, when present, as a DeepSpeed setting with no effect here:
  // consumed, and named in the one "no effect" warning.
  void NoEffect(absl::string_view key) {
    if (object_ == nullptr || !object_->contains(std::string(key))) return;
    consumed_.push_back(std::string(key));
    if (no_effect_ != nullptr) no_effect_->push_back(absl::StrCat("\"", KeyPath(key), "\""));
  }

  absl::StatusOr<std::optional<int64_t>> IntOrAuto(absl::string_view key, int64_t lo, int64_t hi,
                                                   bool allow_auto) {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<int64_t>();
    const std::string want = absl::StrCat("an integer in [", lo, ", ", hi, "]",
                                          allow_auto ? " or \"auto\"" : "");
    if (allow_auto && IsAuto(*v)) return std::optional<int64_t>();
    double d;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Bad(key, *v, want);
      }
      const int64_t i = v->get<int64_t>();
      if (i < lo || i > hi) return Bad(key, *v, want);
      return std::optional<int64_t>(i);
    } else if (v->is_number_float()) {
      d = v->get<double>();  // DeepSpeed files write sizes like 5e8
      if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) ||
          d > static_cast<double>(hi)) {
        return Bad(key, *v, want);
      }
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
    return Bad(key, *v, want);
  }

  template <typename T>
  absl::Status Int(absl::string_view key, int64_t lo, int64_t hi, T* out, bool allow_auto = false) {
    ASSIGN_OR_RETURN(std::optional<int64_t> v, IntOrAuto(key, lo, hi, allow_auto));
    if (v.has_value()) *out = static_cast<T>(*v);
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<double>> DoubleOrAuto(absl::string_view key, double lo, double hi,
                                                     bool allow_auto) {
    const json* v = Get(key);
    if (v == nullptr) return std::optional<double>();
    if (allow_auto && IsAuto(*v)) return std::optional<double>();
    const std::string want = absl::StrCat("a number in [", lo, ", ", hi, "]",
                                          allow_auto ? " or \"auto\"" : "");
    if (!v->is_number()) return Bad(key, *v, want);
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) return Bad(key, *v, want);
    return std::optional<double>(d);
  }

  absl::Status Double(absl::string_view key, double lo, double hi, double* out,
                      bool allow_auto = false) {
    ASSIGN_OR_RETURN(std::optional<double> v, DoubleOrAuto(key, lo, hi, allow_auto));
    if (v.has_value()) *out = *v;
    return absl::OkStatus();
  }

  // "auto" reads as `auto_value`.
  absl::Status Bool(absl::string_view key, bool* out, std::optional<bool> auto_value = {}) {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (auto_value.has_value() && IsAuto(*v)) {
      *out = *auto_value;
      return absl::OkStatus();
    }
    if (!v->is_boolean()) return Bad(key, *v, auto_value ? "true, false or \"auto\"" : "true or false");
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(absl::string_view key, std::string* out) {
    const json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return Bad(key, *v, "a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }

  // A case-insensitive choice among an enum's canonical names
  // (common/config_enums.h): sets *out when present.
  template <typename E, size_t N>
  absl::Status Enum(absl::string_view key, const EnumNames<E, N>& table, E* out) {
    ASSIGN_OR_RETURN(int i, Choice(key, NamesOf(table)));
    if (i >= 0) *out = table[i].value;
    return absl::OkStatus();
  }

  // A case-insensitive choice among `names`; returns its index, or -1 when
  // absent.
  absl::StatusOr<int> Choice(absl::string_view key, const std::vector<std::string>& names) {
    const json* v = Get(key);
    if (v == nullptr) return -1;
    const std::string want = absl::StrCat("one of \"", absl::StrJoin(names, "\", \""), "\"");
    if (!v->is_string()) return Bad(key, *v, want);
    const std::string s = Lower(v->get<std::string>());
    for (size_t i = 0; i < names.size(); ++i) {
      if (Lower(names[i]) == s) return static_cast<int>(i);
    }
    return Bad(key, *v, want);
  }

  // The name `key` holds, spelled as in `names` (case aside), or nullopt
  // when absent; INVALID_ARGUMENT listing `names` otherwise. Callers match
  // the result by name, so a name added to the list changes no other.
  absl::StatusOr<std::optional<std::string>> ChoiceName(
      absl::string_view key, const std::vector<std::string>& names) {
    ASSIGN_OR_RETURN(const int i, Choice(key, names));
    if (i < 0) return std::optional<std::string>();
    return std::optional<std::string>(names[static_cast<size_t>(i)]);
  }

  // A nested object (absent → an empty section).
  absl::StatusOr<Section> Child(absl::string_view key) {
    const json* v = Get(key);
    if (v != nullptr && !v->is_object()) return Bad(key, *v, "an object");
    return Section(v, KeyPath(key), warnings_, no_effect_);
  }

  // Warns about every key not consumed.
  void Finish() const {
    if (object_ == nullptr) return;
    for (auto it = object_->begin(); it != object_->end(); ++it) {
      if (std::find(consumed_.begin(), consumed_.end(), it.key()) == consumed_.end()) {
        const std::string near = Nearest(it.key());
        warnings_->push_back(absl::StrCat(
            "\"", KeyPath(it.key()), "\"",
            near.empty() ? "" : absl::StrCat(" (did you mean \"", KeyPath(near), "\"?)")));
      }
    }
  }

 private:
  // The key of this section nearest to `key` in edits (insertions,
  // deletions, substitutions, case aside), when a typo's worth away: at
  // most 1 edit for keys up to 4 letters, 2 up to 8, 3 beyond; "" otherwise.
  std::string Nearest(const std::string& key) const {
    std::string best;
    size_t best_d = key.size() <= 4 ? 1 : key.size() <= 8 ? 2 : 3;
    for (const std::string& k : known_) {
      const size_t d = EditDistance(Lower(key), Lower(k));
      if (d <= best_d && (best.empty() || d < best_d)) {
        best = k;
        best_d = d;
      }
    }
    return best;
  }


  const json* object_;
  std::string path_;
  std::vector<std::string>* warnings_;   // unknown keys
  std::vector<std::string>* no_effect_;
  std::vector<std::string> consumed_;
  std::vector<std::string> known_;       // every key asked for
};

}  // namespace config_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CONFIG_SECTION_H_
