// Activation checkpointing policies for the GPT worker.
//
//   kNone        keep every block's internal activations from forward to
//                backward (most memory, no recompute);
//   kEveryBlock  keep only each block's input; backward recomputes the
//                block's forward first (DeepSpeed's per-layer checkpoints);
//   kEveryK      keep the input of blocks 0, k, 2k, ...; backward of a
//                segment [s, s+k) recomputes the whole segment from x_s,
//                keeping its internals until the segment's backward is done.
//
// Configured by the JSON config's DeepSpeed `activation_checkpointing`
// section plus ours (parsed elsewhere), e.g.
//   "activation_checkpointing": {"partition_activations": false,
//                                "number_checkpoints": null},
//   "zeroshard": {"activation_checkpointing": {"policy": "every_k", "k": 2}}
//
//   CheckpointPolicy p{.mode = CheckpointMode::kEveryK, .k = 2};
//   RETURN_IF_ERROR(p.Validate());
//   ASSIGN_OR_RETURN(CheckpointPolicy q, ParseCheckpointPolicy("every_block", 1));
#ifndef ZEROSHARD_MODEL_CHECKPOINT_POLICY_H_
#define ZEROSHARD_MODEL_CHECKPOINT_POLICY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard::model {

enum class CheckpointMode { kNone, kEveryBlock, kEveryK };

struct CheckpointPolicy {
  CheckpointMode mode = CheckpointMode::kNone;
  int k = 1;  // segment length for kEveryK (>= 1; kEveryK with k=1 == kEveryBlock)

  absl::Status Validate() const;
  // Whether the forward keeps the internals of block l (only kNone).
  bool KeepsInternals() const { return mode == CheckpointMode::kNone; }
  // Whether the forward keeps the input of block l.
  bool KeepsInput(int block) const;
  // "none", "every_block", "every_k(2)".
  std::string Name() const;
};

// Parses "none" | "every_block" | "every_k" (k taken from `k`).
absl::StatusOr<CheckpointPolicy> ParseCheckpointPolicy(absl::string_view name,
                                                       int k);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CHECKPOINT_POLICY_H_
