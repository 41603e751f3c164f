#include "step/step_protocol.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grad_clip.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::StatusOr<StepProtocol> StepProtocol::Create(
    ShardCluster* cluster, WorkerGroup* group,
    const StepProtocolOptions& options) {
  if (cluster == nullptr) {
    return absl::InvalidArgumentError("step protocol: no shard cluster");
  }
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("step protocol: rank ", options.rank,
                     " is not in a world of ", options.world));
  }
  if (group != nullptr &&
      (group->rank() != options.rank || group->size() != options.world)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step protocol: the group is rank ", group->rank(), " of ",
        group->size(), ", not rank ", options.rank, " of ", options.world));
  }
  if (group == nullptr && options.world > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step protocol: ", options.world, " ranks need a group"));
  }
  if (!(options.step_timeout > absl::ZeroDuration())) {
    return absl::InvalidArgumentError("step protocol: step_timeout must be > 0");
  }
  return StepProtocol(cluster, group, options);
}

absl::Status StepProtocol::ReduceScatterUnits(const FlatLayout& layout,
                                              const float* grad,
                                              uint64_t grad_elems, float* part,
                                              uint64_t part_elems,
                                              float scale) const {
  if (group_ == nullptr) {
    return absl::InvalidArgumentError(
        "reduce-scatter: one rank has no group to reduce over");
  }
  if (layout.num_workers() != static_cast<uint32_t>(options_.world)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce-scatter: the layout splits units over ",
        layout.num_workers(), " ranks, the group has ", options_.world));
  }
  const std::vector<FlatRange> mine =
      layout.WorkerRanges(static_cast<uint32_t>(options_.rank));
  const uint64_t mine_elems =
      layout.WorkerElems(static_cast<uint32_t>(options_.rank));
  if (grad == nullptr || part == nullptr || grad_elems != layout.total_elems() ||
      part_elems != mine_elems) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce-scatter: the gradient holds ", grad_elems, " elements and the "
        "part ", part_elems, "; the layout needs ", layout.total_elems(),
        " and ", mine_elems));
  }
  const std::vector<UnitInfo>& units = layout.units();
  uint64_t at = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const uint64_t n = mine[u].size();
    absl::Status s = group_->ReduceScatter(
        absl::MakeConstSpan(grad + units[u].offset, units[u].padded),
        absl::MakeSpan(part + at, n), scale);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("reduce-scatter of unit '",
                                                 units[u].name, "': ",
                                                 s.message()));
    }
    at += n;
  }
  return group_->Synchronize();
}

absl::Status StepProtocol::AllGatherUnits(const FlatLayout& layout,
                                          void* flat, uint64_t flat_elems,
                                          size_t elem_bytes) const {
  if (group_ == nullptr) {
    return absl::InvalidArgumentError(
        "all-gather: one rank has no group to gather from");
  }
  if (layout.num_workers() != static_cast<uint32_t>(options_.world)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather: the layout splits units over ", layout.num_workers(),
        " ranks, the group has ", options_.world));
  }
  if (flat == nullptr || flat_elems != layout.total_elems() ||
      (elem_bytes != 2 && elem_bytes != 4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather: the buffer holds ", flat_elems, " values of ", elem_bytes,
        " bytes; the layout needs ", layout.total_elems(), " of 2 or 4"));
  }
  uint8_t* bytes = static_cast<uint8_t*>(flat);
  for (const UnitInfo& u : layout.units()) {
    absl::Status s = group_->AllGatherInPlace(absl::MakeSpan(
        bytes + u.offset * elem_bytes, u.padded * elem_bytes));
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("all-gather of unit '",
                                                 u.name, "': ", s.message()));
    }
  }
  return group_->Synchronize();
}

absl::StatusOr<StepDecision> StepProtocol::Decide(absl::Span<double> sums,
                                                  double denominator,
                                                  double max_norm,
                                                  LossScaler* scaler) const {
  if (sums.empty() || scaler == nullptr) {
    return absl::InvalidArgumentError(
        "step decision: needs the sum of squares and a loss scaler");
  }
  if (!(denominator > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step decision: denominator ", denominator, " is not > 0"));
  }
  if (group_ != nullptr) {
    RETURN_IF_ERROR(group_->AllReduce(sums, ReduceOp::kSum));
  }
  const GradCoefficient c =
      ComputeGradCoefficient(sums[0], scaler->scale() * denominator, max_norm);
  ASSIGN_OR_RETURN(const bool apply, scaler->Update(c.overflow));
  StepDecision d;
  d.overflow = c.overflow;
  d.skip = !apply;
  d.norm = c.norm;
  d.clip_factor = c.clip_factor;
  d.coefficient = d.skip ? 0.0 : c.coefficient;
  return d;
}

StepCommit StepProtocol::CommitFor(const StepDecision& decision,
                                   std::vector<StepSetting> settings) const {
  StepCommit c;
  c.skip = decision.skip;
  c.coefficient = decision.skip ? 0.0 : decision.coefficient;
  c.prepare = options_.two_phase;
  c.settings = std::move(settings);
  return c;
}

absl::Status StepProtocol::AgreeOnLeftServers() const {
  const int servers = cluster_->num_servers();
  if (cluster_->options().replicas < 2 || group_->size() < 2) {
    return group_->Barrier();
  }
  // The barrier carries which servers each rank has left (with replicas):
  // every rank leaves them all before it applies or gathers the step, so
  // none waits out a server a peer already found gone, and none reads a
  // copy that another's apply skips.
  std::vector<float> left(servers, 0.0f);
  for (int k = 0; k < servers; ++k) left[k] = cluster_->ServerGone(k) ? 1 : 0;
  RETURN_IF_ERROR(group_->AllReduce(absl::MakeSpan(left), ReduceOp::kMax));
  for (int k = 0; k < servers; ++k) {
    if (left[k] > 0 && !cluster_->ServerGone(k)) {
      cluster_->LeaveServer(
          k, absl::UnavailableError("another rank found it gone"));
    }
  }
  return absl::OkStatus();
}

absl::Status StepProtocol::Commit(
    uint64_t step, uint64_t attempt,
    const std::function<absl::Status()>& before_apply) const {
  if (!options_.two_phase) return absl::OkStatus();
  // Every rank's pushes are prepared on every server once all have passed
  // the barrier: from here the step is decided, and whoever applies it
  // (rank 0 now, or a restart's resume if rank 0 dies) applies all of it.
  if (group_ != nullptr) RETURN_IF_ERROR(AgreeOnLeftServers());
  if (options_.rank != 0) return absl::OkStatus();
  if (before_apply) RETURN_IF_ERROR(before_apply());
  return cluster_->ApplyStep(step, attempt, options_.step_timeout).status();
}

}  // namespace zeroshard
