// Whole-model forward + backward on one flat parameter buffer, built on the
// unit API of gpt.h. Used by tests, the in-process baseline and the engine's
// reference.
//
//   GptBatch batch{.batch = B, .seq = T, .tokens = tokens, .targets = targets};
//   std::vector<float> grads(layout.total_elems(), 0.0f);
//   ASSIGN_OR_RETURN(GptStepResult r, GptForwardBackward(
//       layout, shape, params.data(), DType::kBf16, batch,
//       CheckpointPolicy{CheckpointMode::kEveryBlock}, /*loss_scale=*/1.0f,
//       absl::MakeSpan(grads)));
//
// `params` holds layout.total_elems() elements of `dtype` (the whole padded
// flat space); `grads` (FP32, the same length) is ACCUMULATED into, so several
// calls sum micro-batches.
#ifndef ZEROSHARD_MODEL_GPT_FORWARD_BACKWARD_H_
#define ZEROSHARD_MODEL_GPT_FORWARD_BACKWARD_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "model/gpt_manifest.h"
#include "common/layout.h"
#include "model/checkpoint_policy.h"
#include "model/gpt.h"

namespace zeroshard::model {

struct GptBatch {
  int batch = 0, seq = 0;
  absl::Span<const int32_t> tokens, targets;  // [batch, seq] each
};

struct GptStepResult {
  double loss = 0;                    // mean cross-entropy, unscaled
  int64_t peak_activation_bytes = 0;  // GptModel::memory().peak()
};

absl::StatusOr<GptStepResult> GptForwardBackward(
    const FlatLayout& layout, const GptShape& shape, const void* params,
    DType dtype, const GptBatch& batch, const CheckpointPolicy& policy,
    float loss_scale, absl::Span<float> grads);

// The same on an existing model (its shape, dtype and checkpointing policy),
// e.g. one kept across micro-batches so that its buffers are reused, or the
// device model (model/cuda/device_gpt.h; params and grads may then
// be device memory).
absl::StatusOr<GptStepResult> GptForwardBackward(
    UnitModel& model, const FlatLayout& layout, const void* params,
    const GptBatch& batch, float loss_scale, absl::Span<float> grads);

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_GPT_FORWARD_BACKWARD_H_
