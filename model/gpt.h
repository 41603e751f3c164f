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
#include "model/gpt_block.h"
#include "model/unit_model.h"
#include "model/unit_weights.h"

namespace zeroshard::model {

class GptModel final : public UnitModel {
 public:
  // `layout` must come from MakeGptManifest(shape, any partition count).
  static absl::StatusOr<GptModel> Create(const FlatLayout& layout,
                                         const GptShape& shape,
                                         DType param_dtype,
                                         const CheckpointPolicy& policy);

  int num_blocks() const override { return shape_.layers; }
  DType param_dtype() const override { return param_dtype_; }
  const CheckpointPolicy& policy() const override { return policy_; }
  const char* device_name() const override { return "cpu"; }

  // Starts a micro-batch: tokens and targets [batch, seq] (seq <= context),
  // each in [0, vocab). Drops anything held from an unfinished micro-batch.
  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override;
  absl::Status EmbeddingForward(const UnitParams& embedding) override;
  absl::Status BlockForward(int l, const UnitParams& block) override;
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
  // Whether block l's internals are missing (must be recomputed first).
  bool NeedsRecompute(int l) const override;
  // The first block to recompute before BlockBackward(l): the nearest block
  // j <= l whose input is held.
  int RecomputeStart(int l) const override;
  // Forward of block j again from its held input, keeping its internals and
  // its output (the input of j+1).
  absl::Status RecomputeBlock(int j, const UnitParams& block) override;
  absl::Status BlockBackward(int l, const UnitParams& block,
                             absl::Span<float> grad) override;
  absl::Status EmbeddingBackward(absl::Span<float> embedding_grad) override;

  // Bytes of activations held now and the peak since the last ResetPeak():
  // block inputs, block internals, the residual stream and its gradient
  // (not the transient FP32 scratch of the op being computed).
  const ActivationMemory& memory() const override { return *mem_; }
  void ResetPeak() override { mem_->ResetPeak(); }

 private:
  GptModel() = default;
  absl::StatusOr<UnitWeights> Weights(int unit, const UnitParams& p) const;
  absl::Status CheckGrad(int unit, absl::Span<float> grad) const;
  void Clear();
  // The final unit's forward, shared by training and validation: x = x_L in
  // FP32, ln = ln_f(x) (mean, rstd for backward), lnq = ln rounded to the
  // activation dtype, logits[M,V] = lnq wte^T.
  struct FinalActs {
    std::vector<float> x, ln, mean, rstd, logits;
    ActBuffer lnq;
  };
  absl::Status FinalHeadForward(const UnitWeights& final_weights,
                                const UnitWeights& embedding_weights, FinalActs* f) const;

  std::shared_ptr<const FlatLayout> layout_;
  GptShape shape_;
  DType param_dtype_ = DType::kBf16;
  CheckpointPolicy policy_;
  std::unique_ptr<ActivationMemory> mem_ = std::make_unique<ActivationMemory>();
  BlockDims dims_;
  std::vector<int32_t> tokens_, targets_;
  int next_ = 0;                  // next block to run forward / backward
  std::vector<ActBuffer> inputs_; // [L + 1]: x_l, kept per policy
  std::vector<BlockActs> acts_;   // [L]
  ActBuffer dx_;                  // FP32 gradient of the current block output
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_GPT_H_
