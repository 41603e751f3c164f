// The Llama model on the CPU, unit by unit (the call order and contracts of
// model/gpt.h): the token embedding (no position embedding: the blocks
// rotate q and k), the blocks (model/llama_block.h), and the final unit's
// RMSNorm, head (lm_head, or the token embedding when tied) and mean
// cross-entropy. Its layout must be MakeLlamaManifest(shape, any partition
// count).
//
//   ASSIGN_OR_RETURN(LlamaModel m, LlamaModel::Create(layout, shape,
//                                                      DType::kBf16, policy));
#ifndef ZEROSHARD_MODEL_LLAMA_H_
#define ZEROSHARD_MODEL_LLAMA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/model_shape.h"
#include "model/checkpoint_policy.h"
#include "model/decoder_model.h"
#include "model/kernels/cpu/rope.h"
#include "model/llama_block.h"
#include "model/llama_manifest.h"

namespace zeroshard::model {

class LlamaModel final : public DecoderModel<LlamaBlockActs> {
 public:
  static absl::StatusOr<LlamaModel> Create(const FlatLayout& layout,
                                           const ModelShape& shape, DType param_dtype,
                                           const CheckpointPolicy& policy);

  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override;
  absl::Status EmbeddingForward(const UnitParams& embedding) override;
  // RMSNorm + head + mean cross-entropy, then their backward; the loss's
  // gradient is multiplied by loss_scale. Returns the unscaled loss.
  absl::StatusOr<double> FinalForwardBackward(const UnitParams& final_params,
                                              const UnitParams& embedding,
                                              float loss_scale,
                                              absl::Span<float> final_grad,
                                              absl::Span<float> embedding_grad) override;
  absl::StatusOr<double> FinalForwardLoss(const UnitParams& final_params,
                                          const UnitParams& embedding) override;
  absl::Status EmbeddingBackward(absl::Span<float> embedding_grad) override;

  // After the last block's forward: the logits [vocab] of the micro-batch's
  // last row (generation); ends the micro-batch.
  absl::StatusOr<std::vector<float>> LastRowLogits(const UnitParams& final_params,
                                                   const UnitParams& embedding);

 private:
  LlamaModel() = default;
  absl::Status ForwardBlock(const UnitWeights& w, const ActBuffer& in, ActBuffer* out,
                            LlamaBlockActs* acts) override;
  absl::Status BackwardBlock(const UnitWeights& w, const ActBuffer& in,
                             const LlamaBlockActs& acts, const float* dy, float* dx,
                             float* grad) override;
  // The final unit's forward: x = x_L in FP32, n = RMSNorm(x) (rstd kept),
  // nq = n rounded to the compute dtype, logits[M, V] = nq head^T.
  struct FinalActs {
    std::vector<float> x, n, rstd, logits;
    ActBuffer nq;
  };
  absl::Status FinalHeadForward(const UnitWeights& wf, const UnitWeights& we,
                                FinalActs* f) const;
  // The head: lm_head (the final unit's tensor 1) or, tied, the embedding.
  kernels::cpu::ConstTensor Head(const UnitWeights& wf, const UnitWeights& we) const;

  ModelShape shape_;
  LlamaDims dims_{};
  LlamaBlockDims block_;
  std::map<int64_t, kernels::cpu::RopeTable> rope_;  // by sequence length
  std::vector<int32_t> tokens_, targets_;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_LLAMA_H_
