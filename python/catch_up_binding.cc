#include "python/catch_up_binding.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "client/replica_catch_ups.h"

namespace zeroshard {

namespace py = pybind11;

void BindReplicaCatchUps(py::module_& m) {
  py::class_<ReplicaCatchUps>(m, "ReplicaCatchUps")
      .def(
          "start",
          [](ReplicaCatchUps& c, int k, uint64_t step) {
            py::gil_scoped_release release;
            // A failure is said and counted (failures(k)); not raised.
            c.Start(k, step).IgnoreError();
          },
          py::arg("k"), py::arg("step"))
      .def("busy", &ReplicaCatchUps::Busy, py::arg("k"))
      .def("failures", &ReplicaCatchUps::Failures, py::arg("k"))
      .def("forget_failures", &ReplicaCatchUps::ForgetFailures, py::arg("k"))
      .def(
          "finish",
          [](ReplicaCatchUps& c, uint64_t step) {
            ReplicaCatchUps::Ended e;
            {
              py::gil_scoped_release release;
              e = c.Finish(step);
            }
            return std::make_pair(e.back, e.failed);
          },
          py::arg("step"));
}

}  // namespace zeroshard
