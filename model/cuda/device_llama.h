// Llama on a CUDA device, unit by unit: the UnitModel API (unit_model.h; the
// call order and contracts are gpt.h's) with the computation of LlamaModel
// (model/llama.h: the token embedding, the blocks of device_llama_block.h,
// the final RMSNorm, the head — lm_head, or the token embedding when tied —
// and the mean cross-entropy), its activations in device memory, on one
// compute stream. Staging of host buffers and the blocks' bookkeeping are
// device_decoder.h's, as for GPT-2's device model.
//
// Parameter dtypes: BF16 (compute BF16) and FP32 (compute FP32); FP16 is
// refused (train in bf16 on a GPU). Not yet run on a device (docs/GPU.md).
//
//   ASSIGN_OR_RETURN(auto model, DeviceLlamaModel::Create(layout, shape,
//                    DType::kBf16, policy, /*device=*/0));
//   RETURN_IF_ERROR(model->Begin(B, T, tokens, targets));  // then as gpt.h
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_LLAMA_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_LLAMA_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "common/device_scratch.h"
#include "common/layout.h"
#include "common/model_shape.h"
#include "model/cuda/device_decoder.h"
#include "model/cuda/device_llama_block.h"
#include "model/llama_manifest.h"

namespace zeroshard::model {

class DeviceLlamaModel final : public DeviceDecoderModel<DeviceLlamaActs> {
 public:
  // `attention`: how the blocks run attention (device_block.h); the online
  // and flash kernels need a head dimension they are built for.
  static absl::StatusOr<std::unique_ptr<DeviceLlamaModel>> Create(
      const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
      const CheckpointPolicy& policy, int device,
      DeviceAttention attention = DeviceAttention::kProbs);
  ~DeviceLlamaModel() override;

  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override;

 private:
  // One sequence length's rotary table on the device.
  struct RopeOnDevice {
    DeviceScratch cos, sin;
    DeviceRope view;
  };

  DeviceLlamaModel() = default;
  // embed_tokens[token]: no positions (the blocks rotate q and k).
  absl::Status EmbedTokens(const DeviceUnitWeights& w, float* x) override;
  absl::Status ForwardBlock(const DeviceUnitWeights& w, const DeviceBuffer& in,
                            DeviceBuffer* out, DeviceLlamaActs* acts) override;
  absl::Status BackwardBlock(const DeviceUnitWeights& w, const DeviceBuffer& in,
                             const DeviceLlamaActs& acts, const float* dy,
                             float* dx, float* grad) override;
  int64_t block_scratch_bytes() const override;
  void set_block_timer(kernels::cuda::OpTimer* timer) override {
    runner_->set_timer(timer);
  }
  // The final RMSNorm (rstd kept in head_[kHeadOwn]).
  absl::Status FinalNormForward(const DeviceUnitWeights& wf, const float* x,
                                float* normed) override;
  absl::Status FinalNormBackward(const DeviceUnitWeights& wf, const float* dn,
                                 const float* x, float* dx,
                                 float* grad) override;
  // lm_head (the final unit's tensor 1) or, tied, the embedding.
  kernels::cuda::DeviceTensor HeadMatrix(const DeviceUnitWeights& wf,
                                         const DeviceUnitWeights& we) const override {
    return dims_.tie_embeddings ? we.Matrix(0) : wf.Matrix(1);
  }
  float* HeadGrad(const DeviceUnitWeights& wf, const DeviceUnitWeights& we,
                  float* gf, float* ge) const override {
    return dims_.tie_embeddings ? ge + we.offset[0] : gf + wf.offset[1];
  }
  absl::Status EmbeddingGrad(float* grad) override;
  // The rotary table for `seq` on the device, made on first use.
  absl::StatusOr<DeviceRope> RopeFor(int64_t seq);

  LlamaDims dims_{};
  LlamaBlockDims block_;
  DeviceRope rope_;
  std::map<int64_t, std::unique_ptr<RopeOnDevice>> ropes_;  // by sequence length
  std::unique_ptr<DeviceLlamaBlockRunner> runner_;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_LLAMA_H_
