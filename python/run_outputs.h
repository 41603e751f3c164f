// The binding of a run's outputs (progress bar, metrics file, loss plot);
// python/run_outputs.cc.
#ifndef ZEROSHARD_PYTHON_RUN_OUTPUTS_H_
#define ZEROSHARD_PYTHON_RUN_OUTPUTS_H_

#include <pybind11/pybind11.h>

namespace zeroshard {

void BindRunOutputs(pybind11::module_& m);

}  // namespace zeroshard

#endif  // ZEROSHARD_PYTHON_RUN_OUTPUTS_H_
