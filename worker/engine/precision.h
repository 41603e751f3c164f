// How the training config's precision and checkpointing policy map onto the
// model: shared by StepEngine and LocalTrainer so the two cannot drift.
#ifndef ZEROSHARD_WORKER_ENGINE_PRECISION_H_
#define ZEROSHARD_WORKER_ENGINE_PRECISION_H_

#include <algorithm>

#include "common/config.h"
#include "common/dtype.h"
#include "model/checkpoint_policy.h"

namespace zeroshard {

// The dtype workers hold parameters in: BF16, FP16 or FP32.
inline DType ParamDTypeFor(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return DType::kBf16;
    case Precision::kFp16:
      return DType::kFp16;
    default:
      return DType::kFp32;
  }
}

// The model's checkpointing policy for the config's.
inline model::CheckpointPolicy ModelCheckpointPolicy(
    const ActivationCheckpointingConfig& c) {
  model::CheckpointPolicy p;
  switch (c.policy) {
    case CheckpointPolicy::kEveryBlock:
      p.mode = model::CheckpointMode::kEveryBlock;
      break;
    case CheckpointPolicy::kEveryK:
      p.mode = model::CheckpointMode::kEveryK;
      p.k = std::max(c.k, 1);
      break;
    default:
      p.mode = model::CheckpointMode::kNone;
  }
  return p;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_PRECISION_H_
