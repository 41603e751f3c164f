// One training step's protocol between the ranks and the shard servers, the
// same for the C++ worker (worker/engine) and the PyTorch front-end
// (python/): the engines own their gradients (the worker's units, torch's
// flat buffers) and call one method per phase.
//
//   StepProtocol p(cluster, group, {rank, world, step_timeout, two_phase});
//   p.ReduceScatterUnits(layout, grad, part, 1.0f / world);  // ranks, host or device
//   double sums[2] = {sum_of_squares, loss};                // this rank's
//   ASSIGN_OR_RETURN(StepDecision d, p.Decide(sums, denominator, clip, &scaler));
//   cluster->PushGrad(step, rank, my_ranges, p.CommitFor(d, settings));
//   RETURN_IF_ERROR(p.Commit(step, attempt));                // barrier, rank 0 applies
//   cluster->Gather(my_ranges, ..., flat at my ranges);       // the next version
//   RETURN_IF_ERROR(p.AllGatherUnits(layout, flat, total, 4)); // every unit whole
//
// The decision: one all-reduce (sum) of every rank's sums, of which the
// first is the sum of squares of its scaled gradient part; the global norm,
// the overflow flag and the one coefficient the servers apply follow from
// it (common/grad_clip.h), and the loss scaler moves (common/loss_scaler.h).
// Every rank reaches the same decision from the same totals.
//
// The commit: with two phases, every rank's push is held on the servers
// (prepared) until all ranks have passed a barrier; then rank 0 applies the
// step on every server (docs/DESIGN.md, "Crash recovery"), so that a rule
// updating whole tensors (Muon) has all of a matrix's gradient at once and
// a rank that dies after the barrier cannot leave the step half applied.
#ifndef ZEROSHARD_STEP_STEP_PROTOCOL_H_
#define ZEROSHARD_STEP_STEP_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/push_session.h"
#include "client/shard_cluster.h"
#include "comm/collectives.h"
#include "common/layout.h"
#include "common/loss_scaler.h"

namespace zeroshard {

struct StepDecision {
  bool overflow = false;    // the global sum of squares was not finite
  bool skip = false;        // the step is not applied (overflow)
  double norm = 0;          // the unscaled global gradient norm
  double clip_factor = 1;   // min(1, max_norm / (norm + 1e-6)), or 1
  double coefficient = 0;   // what the servers multiply the gradient by; 0 when skipped
};

struct StepProtocolOptions {
  int rank = 0;
  int world = 1;
  absl::Duration step_timeout = absl::Seconds(120);
  // Pushes are prepared and rank 0 applies them after a barrier; without,
  // each push applies on its own (one rank).
  bool two_phase = true;
};

class StepProtocol {
 public:
  // `cluster` is required; `group` may be null for one rank (no collective
  // runs). Both must outlive the protocol.
  static absl::StatusOr<StepProtocol> Create(ShardCluster* cluster,
                                             WorkerGroup* group,
                                             const StepProtocolOptions& options);

  const StepProtocolOptions& options() const { return options_; }
  // Whether the group's collectives take device memory (NCCL); false
  // without a group.
  bool device_buffers() const {
    return group_ != nullptr && group_->device_buffers();
  }

  // Reduce-scatter unit by unit: for every unit of `layout`, `grad`'s padded
  // unit (at the unit's flat offset) summed over the ranks, times `scale`,
  // into this rank's part of it, the parts laid end to end in `part` (the
  // rank's WorkerRanges, in order). Host or device pointers, as the group
  // takes them; `grad` holds layout.total_elems() values and `part` the
  // rank's elements. Without a group: INVALID_ARGUMENT.
  absl::Status ReduceScatterUnits(const FlatLayout& layout, const float* grad,
                                  uint64_t grad_elems, float* part,
                                  uint64_t part_elems, float scale) const;

  // The other direction, after this rank gathered its parts from the
  // servers into `flat` (the whole flat space, `elem_bytes` a value):
  // every unit all-gathered in place, so that each rank holds every unit.
  // Host or device memory, as the group takes it.
  absl::Status AllGatherUnits(const FlatLayout& layout, void* flat,
                              uint64_t flat_elems, size_t elem_bytes) const;

  // Totals `sums` over the ranks in place (sums[0]: this rank's sum of
  // squares of its scaled gradient; the rest the caller's, a loss say) and
  // decides the step: the gradient's scale is the loss scale times
  // `denominator` (the ranks and micro-batches averaged over, or 1 when the
  // gradient is already averaged). `scaler` records the overflow.
  absl::StatusOr<StepDecision> Decide(absl::Span<double> sums,
                                      double denominator, double max_norm,
                                      LossScaler* scaler) const;

  // The commit every rank's push carries for `decision`.
  StepCommit CommitFor(const StepDecision& decision,
                       std::vector<StepSetting> settings = {}) const;

  // After this rank's push returned: with two phases, the barrier, then on
  // rank 0 `before_apply` (when given) and the apply of `step` on every
  // server. Without two phases, nothing. With replicas the barrier is an
  // all-reduce of the servers each rank has left, and every rank leaves
  // them all, so the ranks apply and gather the step from the same copies.
  absl::Status Commit(uint64_t step, uint64_t attempt,
                      const std::function<absl::Status()>& before_apply =
                          nullptr) const;

 private:
  // Commit's barrier; with replicas it also makes every rank leave the
  // servers any rank has left.
  absl::Status AgreeOnLeftServers() const;

  StepProtocol(ShardCluster* cluster, WorkerGroup* group,
               const StepProtocolOptions& options)
      : cluster_(cluster), group_(group), options_(options) {}

  ShardCluster* cluster_;
  WorkerGroup* group_;
  StepProtocolOptions options_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_STEP_STEP_PROTOCOL_H_
