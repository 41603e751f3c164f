// GPT-2 forward/backward driven unit by unit, for a ZeRO-3 engine that
// gathers one unit's parameters at a time, computes, and frees them.
//
// Units and tensor order: model/gpt_manifest.h (unit 0 "embedding" = wte,
// wpe; units 1..L "block_l"; unit L+1 "final" = ln_f). Offsets inside a unit:
// common/layout.h (TensorInfo.offset - UnitInfo.offset). The LM head is tied
// to wte.
//
// Dtypes. Parameters arrive per call as a UnitParams: one contiguous buffer of
// at least the unit's numel elements (normally the padded unit the engine
// gathered) in the training dtype: BF16 (default), FP32 (parity checks) or
// FP16 (computed in FP32 on the CPU after widening). Gradients go to FP32
// buffers of at least the unit's numel elements, indexed like the params,
// and are ACCUMULATED (+=): micro-batches sum, and wte receives both the LM
// head's and the embedding's gradient. Zero them at the start of a step.
// Activations are stored in BF16 for BF16 training, else FP32.
//
// What the model keeps between calls: the micro-batch's tokens and targets,
// the block inputs and internals its CheckpointPolicy keeps, and the current
// gradient of the residual stream. The engine keeps only parameters and
// gradients; UnitParams buffers need to live only for the call.
//
// One micro-batch, in this order (any other order is FAILED_PRECONDITION):
//   RETURN_IF_ERROR(model.Begin(B, T, tokens, targets));
//   RETURN_IF_ERROR(model.EmbeddingForward(unit0));
//   for (int l = 0; l < L; ++l) RETURN_IF_ERROR(model.BlockForward(l, unit[l+1]));
//   ASSIGN_OR_RETURN(double loss, model.FinalForwardBackward(
//       unitF, unit0, loss_scale, gradF, grad0));        // starts backward
//   for (int l = L - 1; l >= 0; --l) {
//     if (model.NeedsRecompute(l)) {                     // policy dropped l's internals
//       for (int j = model.RecomputeStart(l); j <= l; ++j)
//         RETURN_IF_ERROR(model.RecomputeBlock(j, unit[j+1]));
//     }
//     RETURN_IF_ERROR(model.BlockBackward(l, unit[l+1], grad[l+1]));
//   }
//   RETURN_IF_ERROR(model.EmbeddingBackward(grad0));
//
// With kEveryK the recompute of a segment re-reads blocks s..l in forward
// order before their backward in reverse order: the engine gathers them again
// (or keeps them). Not thread-safe; one model per worker thread.
#ifndef ZEROSHARD_MODEL_GPT_H_
#define ZEROSHARD_MODEL_GPT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "model/gpt_manifest.h"
#include "common/layout.h"
#include "model/activation_buffer.h"
#include "model/checkpoint_policy.h"
#include "model/decoder_model.h"
#include "model/gpt_block.h"
#include "model/unit_model.h"
#include "model/unit_weights.h"

namespace zeroshard::model {

class GptModel final : public DecoderModel<BlockActs> {
 public:
  // `layout` must come from MakeGptManifest(shape, any partition count).
  static absl::StatusOr<GptModel> Create(const FlatLayout& layout,
                                         const GptShape& shape,
                                         DType param_dtype,
                                         const CheckpointPolicy& policy);

  // Starts a micro-batch: tokens and targets [batch, seq] (seq <= context),
  // each in [0, vocab). Drops anything held from an unfinished micro-batch.
  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override;
  absl::Status EmbeddingForward(const UnitParams& embedding) override;
  // ln_f + tied LM head + mean cross-entropy, then their backward. The loss's
  // gradient is multiplied by loss_scale (1 for BF16/FP32; the FP16 dynamic
  // scale), so every gradient is scaled by it. Returns the unscaled loss.
  absl::StatusOr<double> FinalForwardBackward(const UnitParams& final_params,
                                              const UnitParams& embedding,
                                              float loss_scale,
                                              absl::Span<float> final_grad,
                                              absl::Span<float> embedding_grad) override;
  // Forward only (validation): ln_f + tied LM head + mean cross-entropy
  // after the last block's forward; returns the loss and ends the
  // micro-batch (the model is idle again, nothing held for a backward).
  absl::StatusOr<double> FinalForwardLoss(const UnitParams& final_params,
                                          const UnitParams& embedding) override;
  absl::Status EmbeddingBackward(absl::Span<float> embedding_grad) override;

 private:
  GptModel() = default;
  absl::Status ForwardBlock(const UnitWeights& w, const ActBuffer& in, ActBuffer* out,
                            BlockActs* acts) override;
  absl::Status BackwardBlock(const UnitWeights& w, const ActBuffer& in,
                             const BlockActs& acts, const float* dy, float* dx,
                             float* grad) override;
  // The final unit's forward, shared by training and validation: x = x_L in
  // FP32, ln = ln_f(x) (mean, rstd for backward), lnq = ln rounded to the
  // activation dtype, logits[M,V] = lnq wte^T.
  struct FinalActs {
    std::vector<float> x, ln, mean, rstd, logits;
    ActBuffer lnq;
  };
  absl::Status FinalHeadForward(const UnitWeights& final_weights,
                                const UnitWeights& embedding_weights, FinalActs* f) const;

  GptShape shape_;
  BlockDims dims_;
  std::vector<int32_t> tokens_, targets_;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_GPT_H_
