// A registered rule's param (common/optimizer_rules.h) read from its JSON
// value in a config: the one reading of a number, bool, pair or choice that
// the "optimizer" section and a parameter group's "optimizer" share.
//
//   std::map<std::string, double> given;
//   if (!ReadRuleParamJson(param, value, &given)) {
//     return Bad(key, value, param.RangeText());
//   }
#ifndef ZEROSHARD_COMMON_RULE_PARAMS_JSON_H_
#define ZEROSHARD_COMMON_RULE_PARAMS_JSON_H_

#include <map>
#include <string>

#include "common/optimizer_rules.h"
#include "nlohmann/json.hpp"

namespace zeroshard {

// Adds `param`'s value as its rule keeps it to `out` (a pair as "name[0]"
// and "name[1]", a bool 0 or 1, a choice its index; JSON null: the
// param's default, for a param whose default is none). False, adding
// nothing, when `value` is not of the param's kind or not in its range.
bool ReadRuleParamJson(const RuleParam& param, const nlohmann::json& value,
                       std::map<std::string, double>* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_RULE_PARAMS_JSON_H_
