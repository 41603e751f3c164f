// What differs between two optimizers as the servers keep them (the wire's
// OptimizerConfig, parameter groups included), said in the words of the
// configuration file: a checkpoint's and a resume's, compared by the
// servers' restore and, before anything starts, by zeroshard-train.
//
//   const std::string diff = OptimizerDifference(checkpoint, now);
//   if (!diff.empty()) ... "optimizer.type: AdamW -> Lion; optimizer.params.lr: 0.001 -> 0.002"
#ifndef ZEROSHARD_WIRE_OPTIMIZER_DIFFERENCE_H_
#define ZEROSHARD_WIRE_OPTIMIZER_DIFFERENCE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// "" when nothing the optimizer state depends on differs; else one
// "key: was -> now" per difference, joined by "; ". Equivalent, not
// Equals: a field left out (an older writer's, e.g. the schedule's
// warmup_type) matches the same default stated explicitly. Not compared:
// the parameter groups' ranges (they follow the layout, which a resume may
// change; the groups' names and settings may not), and the schedule's
// total_steps and warmup_steps, which follow the run's length (a warmup
// longer than a short run is shortened to fit it, common/config_json.cc
// FitWarmup, and regains its configured length when the run is extended);
// a run extended past its end follows the resuming configuration's
// schedule, as DeepSpeed's schedulers follow the configuration they are
// built from.
std::string OptimizerDifference(v1::OptimizerConfig was,
                                v1::OptimizerConfig now);

// One line of MessageDifferencer's report ("modified: kind: ADAMW -> LION")
// in the configuration file's words ("optimizer.type: AdamW -> Lion").
std::string InConfigWords(absl::string_view line);

// `optimizer` with every parameter group's ranges cleared.
v1::OptimizerConfig WithoutRanges(v1::OptimizerConfig optimizer);

// An OptimizerConfig from protobuf's JSON form (the checkpoint manifest's
// "optimizer"); DATA_LOSS naming what does not parse.
absl::StatusOr<v1::OptimizerConfig> OptimizerConfigFromJson(
    absl::string_view json);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_OPTIMIZER_DIFFERENCE_H_
