// The parameter groups of one server's owned range: per-range weight decay
// and learning-rate scale (InitRequest.optimizer.param_groups), looked up as
// pushes are applied.
//
// Every element of the owned range has exactly one setting: the group whose
// ranges hold it, or the optimizer's own weight_decay with lr scale 1 (no
// group: padding, or every element under torch's single group).
//
//   ASSIGN_OR_RETURN(ParamGroupTable t,
//                    ParamGroupTable::Create(request.optimizer(), owned, total));
//   for (const ParamGroupTable::Span& s : t.Split({begin, end}))
//     MakeAdamStep(config, t, coef, s.weight_decay, s.lr_scale) ... s.range
#ifndef ZEROSHARD_SERVER_PARAM_GROUP_TABLE_H_
#define ZEROSHARD_SERVER_PARAM_GROUP_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

class ParamGroupTable {
 public:
  // A piece of a range with one setting.
  struct Span {
    FlatRange range;
    double weight_decay = 0;
    double lr_scale = 1;
    // In a group with a tensor rule (TensorRule): updated whole, tensor by
    // tensor, not by the element-wise rule.
    bool whole = false;
    // Its index in OptimizerConfig.param_groups; -1: in no group.
    int group = -1;
  };

  // Validates the groups (unique non-empty names, weight_decay and lr_scale
  // finite and in [0, 1e6], a tensor rule of a known kind with valid
  // hyperparameters, every range non-empty, inside [0, total_elems) and
  // overlapping no other) and keeps the pieces inside `owned`.
  // INVALID_ARGUMENT naming the group otherwise.
  static absl::StatusOr<ParamGroupTable> Create(
      const v1::OptimizerConfig& optimizer, FlatRange owned,
      uint64_t total_elems);

  // `range` (inside the owned range) cut where the setting changes, in order;
  // the spans cover it exactly.
  std::vector<Span> Split(FlatRange range) const;

  // True when no element of the owned range is in a group.
  bool empty() const { return entries_.empty(); }

  // OK for a step's group settings (StepParams::settings): none, or one per
  // group when no group has a tensor rule; INVALID_ARGUMENT saying which
  // otherwise.
  absl::Status CheckSettings(size_t settings) const;

 private:
  double base_weight_decay_ = 0;
  size_t groups_ = 0;      // every group, whether or not it is in `owned`
  bool any_rule_ = false;  // a group with a tensor rule
  std::vector<Span> entries_;  // sorted, disjoint, inside the owned range
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_PARAM_GROUP_TABLE_H_
