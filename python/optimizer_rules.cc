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
          py::list types;
          for (const std::string& t : r.types) types.append(t);
          d["types"] = types;
          d["torch_class"] = r.torch_class;
          py::list params;
          for (const RuleParam& p : r.params) {
            py::dict q;
            q["name"] = p.name;
            q["bool"] = p.kind == RuleParam::Kind::kBool;
            q["required"] = std::isnan(p.default_value);
            if (std::isnan(p.default_value)) {
              q["default"] = py::none();
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
          py::list slots;
          for (const StateSlot& s : r.slots) slots.append(s.name);
          d["slots"] = slots;
          out.append(d);
        }
        return out;
      },
      "The registered optimizer rules (common/optimizer_rules.h): a list of "
      "dicts with name, types, torch_class, params (name, bool, required, "
      "default), fixed ({keyword: value}) and slots.");
}

}  // namespace zeroshard
