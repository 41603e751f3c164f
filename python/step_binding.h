// The step's protocol (step/step_protocol.h) as the PyTorch front-end calls
// it: the engine keeps torch's side (hooks, flat buffers, the loop's API) and
// calls one method of this object per phase.
#ifndef ZEROSHARD_PYTHON_STEP_BINDING_H_
#define ZEROSHARD_PYTHON_STEP_BINDING_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "client/shard_cluster.h"
#include "comm/collectives.h"
#include "step/step_protocol.h"

namespace zeroshard {

namespace py = pybind11;

// `cluster` and `group` (null for one rank) outlive the object: the
// binding that makes it keeps their Python owners alive.
std::unique_ptr<StepProtocol> MakePyStepProtocol(ShardCluster* cluster,
                                                 WorkerGroup* group, int rank,
                                                 int world,
                                                 double step_timeout_s,
                                                 bool two_phase);

// Registers zeroshard._zeroshard.StepProtocol and StepDecision.
void BindStepProtocol(py::module_& m);

}  // namespace zeroshard

#endif  // ZEROSHARD_PYTHON_STEP_BINDING_H_
