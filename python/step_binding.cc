#include "python/step_binding.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/loss_scaler.h"
#include "python/ext_status.h"

namespace zeroshard {
namespace {

// A Gloo group takes host buffers, an NCCL group device addresses: the
// other kind would be read as the wrong memory.
void NeedBuffers(const StepProtocol& p, bool device, const char* call) {
  if (p.device_buffers() == device) return;
  Raise(absl::FailedPreconditionError(absl::StrCat(
      call, ": this protocol's group takes ",
      p.device_buffers() ? "device addresses; use the _device call"
                         : "host buffers")));
}

}  // namespace

std::unique_ptr<StepProtocol> MakePyStepProtocol(ShardCluster* cluster,
                                                 WorkerGroup* group, int rank,
                                                 int world,
                                                 double step_timeout_s,
                                                 bool two_phase) {
  if (!(step_timeout_s > 0)) {
    Raise(absl::InvalidArgumentError("step_timeout_s must be > 0"));
  }
  StepProtocolOptions o;
  o.rank = rank;
  o.world = world;
  o.step_timeout = absl::Seconds(step_timeout_s);
  o.two_phase = two_phase;
  return std::make_unique<StepProtocol>(
      Value(StepProtocol::Create(cluster, group, o)));
}

void BindStepProtocol(py::module_& m) {
  py::class_<StepDecision>(m, "StepDecision")
      .def_readonly("overflow", &StepDecision::overflow)
      .def_readonly("skip", &StepDecision::skip)
      .def_readonly("norm", &StepDecision::norm)
      .def_readonly("clip_factor", &StepDecision::clip_factor)
      .def_readonly("coefficient", &StepDecision::coefficient);

  py::class_<StepProtocol>(m, "StepProtocol")
      .def_property_readonly(
          "two_phase", [](const StepProtocol& p) { return p.options().two_phase; })
      .def(
          "reduce_scatter",
          [](const StepProtocol& p, const FlatLayout& layout,
             const py::buffer& grad, const py::buffer& part, float scale) {
            NeedBuffers(p, false, "reduce_scatter");
            const uint64_t total = layout.total_elems();
            const uint64_t mine =
                layout.WorkerElems(static_cast<uint32_t>(p.options().rank));
            Bytes g = BufferOf(grad, false, total * sizeof(float),
                               "reduce_scatter grad");
            Bytes o = BufferOf(part, true, mine * sizeof(float),
                               "reduce_scatter part");
            py::gil_scoped_release release;
            Check(p.ReduceScatterUnits(layout, static_cast<const float*>(g.data),
                                       total, static_cast<float*>(o.data), mine,
                                       scale));
          },
          py::arg("layout"), py::arg("grad"), py::arg("part"),
          py::arg("scale"),
          "Every unit of `grad` (FP32, the whole flat space) summed over the "
          "ranks times `scale`, into this rank's parts laid end to end in "
          "`part` (host buffers).")
      .def(
          "reduce_scatter_device",
          [](const StepProtocol& p, const FlatLayout& layout, uintptr_t grad,
             uint64_t grad_elems, uintptr_t part, uint64_t part_elems,
             float scale) {
            NeedBuffers(p, true, "reduce_scatter_device");
            py::gil_scoped_release release;
            Check(p.ReduceScatterUnits(
                layout, reinterpret_cast<const float*>(grad), grad_elems,
                reinterpret_cast<float*>(part), part_elems, scale));
          },
          py::arg("layout"), py::arg("grad"), py::arg("grad_elems"),
          py::arg("part"), py::arg("part_elems"), py::arg("scale"),
          "reduce_scatter on device memory (CUDA tensors' data_ptr()) over an "
          "NCCL group; returns when the results are in `part`.")
      .def(
          "all_gather",
          [](const StepProtocol& p, const FlatLayout& layout,
             const py::buffer& flat) {
            NeedBuffers(p, false, "all_gather");
            py::buffer_info info = flat.request(true);
            const size_t es = static_cast<size_t>(info.itemsize);
            Bytes b = BufferOf(flat, true, layout.total_elems() * es,
                               "all_gather");
            py::gil_scoped_release release;
            Check(p.AllGatherUnits(layout, b.data, layout.total_elems(), es));
          },
          py::arg("layout"), py::arg("flat"),
          "Every unit of `flat` (the whole flat space, this rank's parts in "
          "place) all-gathered in place over the ranks (host buffers).")
      .def(
          "all_gather_device",
          [](const StepProtocol& p, const FlatLayout& layout, uintptr_t flat,
             uint64_t flat_elems, size_t elem_bytes) {
            NeedBuffers(p, true, "all_gather_device");
            py::gil_scoped_release release;
            Check(p.AllGatherUnits(layout, reinterpret_cast<void*>(flat),
                                   flat_elems, elem_bytes));
          },
          py::arg("layout"), py::arg("flat"), py::arg("flat_elems"),
          py::arg("elem_bytes"),
          "all_gather on device memory over an NCCL group; returns when "
          "every unit is in place.")
      .def(
          "decide",
          [](const StepProtocol& p, double sumsq, double denominator,
             double max_norm, LossScaler& scaler) {
            std::vector<double> sums = {sumsq};
            py::gil_scoped_release release;
            return Value(p.Decide(absl::MakeSpan(sums), denominator, max_norm,
                                  &scaler));
          },
          py::arg("sumsq"), py::arg("denominator"), py::arg("max_norm"),
          py::arg("scaler"),
          "The ranks' one decision on the step from this rank's sum of "
          "squares of its scaled gradient part (all-reduced); the scaler "
          "records the overflow.")
      .def(
          "commit",
          [](const StepProtocol& p, uint64_t step, uint64_t attempt) {
            py::gil_scoped_release release;
            Check(p.Commit(step, attempt));
          },
          py::arg("step"), py::arg("attempt") = 0,
          "With two phases: the barrier, then rank 0 applies the prepared "
          "step on every server; otherwise nothing.");
}

}  // namespace zeroshard
