// The binding that describes the registered optimizer rules to the
// front-end (optimizer_rules(): each rule's name, config types, torch
// class, params with their defaults, fixed keywords and slots), so that it
// maps a torch optimizer object to a rule without naming any;
// python/optimizer_rules.cc.
#ifndef ZEROSHARD_PYTHON_OPTIMIZER_RULES_H_
#define ZEROSHARD_PYTHON_OPTIMIZER_RULES_H_

#include <pybind11/pybind11.h>

namespace zeroshard {

void BindOptimizerRules(pybind11::module_& m);

}  // namespace zeroshard

#endif  // ZEROSHARD_PYTHON_OPTIMIZER_RULES_H_
