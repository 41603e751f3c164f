#include "python/optimizer_rules.h"

#include <cmath>

#include "common/optimizer_rules.h"

namespace py = pybind11;

namespace zeroshard {

void BindOptimizerRules(py::module_& m) {
  m.def(
      "optimizer_rules",
      []() {
        py::list out;
        for (const RuleInfo& r : RegisteredRules()) {
          py::dict d;
          d["name"] = r.name;
          // "element", or "whole_tensor": a parameter group's rule (Muon,
          // Adafactor), given by the config, never a torch object.
          d["scope"] = r.element_wise() ? "element" : "whole_tensor";
          d["kind"] = r.kind == OptimizerKind::kRule ? std::string("rule")
                                                     : OptimizerName(r.kind, "");
          py::list types;
          for (const std::string& t : r.types) types.append(t);
          d["types"] = types;
          d["torch_class"] = r.torch_class;
          py::list params;
          for (const RuleParam& p : r.params) {
            py::dict q;
            q["name"] = p.name;
            q["bool"] = p.kind == RuleParam::Kind::kBool;
            q["pair"] = p.kind == RuleParam::Kind::kPair;
            // lr, weight_decay, eps and betas travel per group, step by step.
            q["common"] = p.common_field();
            q["required"] = std::isnan(p.default_value);
            if (std::isnan(p.default_value)) {
              q["default"] = py::none();
            } else if (p.kind == RuleParam::Kind::kPair) {
              q["default"] = py::make_tuple(p.default_value, p.second_default);
            } else if (p.kind == RuleParam::Kind::kBool) {
              q["default"] = p.default_value != 0;
            } else {
              q["default"] = p.default_value;
            }
            params.append(q);
          }
          d["params"] = params;
          py::dict fixed;
          for (const FixedParam& f : r.fixed) fixed[py::str(f.name)] = f.value;
          d["fixed"] = fixed;
          // DeepSpeed's "Adam": its adam_w_mode (default true) picks AdamW;
          // the torch class sets it false.
          d["mode_param"] = r.mode_param;
          py::list slots;
          for (const StateSlot& s : r.slots) slots.append(s.name);
          d["slots"] = slots;
          out.append(d);
        }
        return out;
      },
      "The registered optimizer rules (common/optimizer_rules.h): a list of "
      "dicts with name, scope, kind, types, torch_class, params (name, bool, pair, "
      "common, required, default), fixed ({keyword: value}), mode_param and "
      "slots.");
}

}  // namespace zeroshard
