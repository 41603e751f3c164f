// With replicas, rank 0's catch-ups of servers that answer again
// (client/replica_catch_ups.h) as the PyTorch front-end calls them between
// optimizer steps: zeroshard._zeroshard.ReplicaCatchUps, made by
// Cluster.catch_ups(directory).
#ifndef ZEROSHARD_PYTHON_CATCH_UP_BINDING_H_
#define ZEROSHARD_PYTHON_CATCH_UP_BINDING_H_

#include <pybind11/pybind11.h>

namespace zeroshard {

// Registers zeroshard._zeroshard.ReplicaCatchUps.
void BindReplicaCatchUps(pybind11::module_& m);

}  // namespace zeroshard

#endif  // ZEROSHARD_PYTHON_CATCH_UP_BINDING_H_
