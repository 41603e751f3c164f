#include "model/checkpoint_policy.h"

#include "absl/strings/str_cat.h"

namespace zeroshard::model {

absl::Status CheckpointPolicy::Validate() const {
  if (mode == CheckpointMode::kEveryK && k < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation_checkpointing: k must be >= 1 for every_k, got ", k));
  }
  return absl::OkStatus();
}

bool CheckpointPolicy::KeepsInput(int block) const {
  switch (mode) {
    case CheckpointMode::kNone:
    case CheckpointMode::kEveryBlock:
      return true;
    case CheckpointMode::kEveryK:
      return block % k == 0;
  }
  return true;
}

std::string CheckpointPolicy::Name() const {
  switch (mode) {
    case CheckpointMode::kNone:
      return "none";
    case CheckpointMode::kEveryBlock:
      return "every_block";
    case CheckpointMode::kEveryK:
      return absl::StrCat("every_k(", k, ")");
  }
  return "unknown";
}

absl::StatusOr<CheckpointPolicy> ParseCheckpointPolicy(absl::string_view name,
                                                       int k) {
  CheckpointPolicy p;
  if (name == "none") {
    p.mode = CheckpointMode::kNone;
  } else if (name == "every_block") {
    p.mode = CheckpointMode::kEveryBlock;
  } else if (name == "every_k") {
    p.mode = CheckpointMode::kEveryK;
    p.k = k;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "activation_checkpointing policy '", name,
        "' is not one of none, every_block, every_k"));
  }
  if (absl::Status s = p.Validate(); !s.ok()) return s;
  return p;
}

}  // namespace zeroshard::model
