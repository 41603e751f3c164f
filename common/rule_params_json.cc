#include "common/rule_params_json.h"

#include <cmath>

namespace zeroshard {

bool ReadRuleParamJson(const RuleParam& p, const nlohmann::json& v,
                       std::map<std::string, double>* out) {
  auto number = [&](const nlohmann::json& x, double* d) {
    if (!x.is_number()) return false;
    *d = x.get<double>();
    return std::isfinite(*d) && p.InRange(*d);
  };
  if (v.is_null()) {
    if (!p.default_is_none) return false;
    (*out)[p.name] = p.default_value;
    return true;
  }
  switch (p.kind) {
    case RuleParam::Kind::kBool:
      if (!v.is_boolean()) return false;
      (*out)[p.name] = v.get<bool>() ? 1 : 0;
      return true;
    case RuleParam::Kind::kChoice:
      if (!v.is_string()) return false;
      for (size_t i = 0; i < p.choices.size(); ++i) {
        if (p.choices[i] == v.get<std::string>()) {
          (*out)[p.name] = static_cast<double>(i);
          return true;
        }
      }
      return false;
    case RuleParam::Kind::kPair: {
      double a = 0, b = 0;
      if (!v.is_array() || v.size() != 2 || !number(v[0], &a) || !number(v[1], &b)) {
        return false;
      }
      (*out)[p.name + "[0]"] = a;
      (*out)[p.name + "[1]"] = b;
      return true;
    }
    case RuleParam::Kind::kNumber: {
      double d = 0;
      if (!number(v, &d)) return false;
      (*out)[p.name] = d;
      return true;
    }
  }
  return false;
}

}  // namespace zeroshard
