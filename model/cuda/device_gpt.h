// GPT-2 on a CUDA device, unit by unit: the UnitModel API (unit_model.h; the
// call order and contracts are gpt.h's) with the computation of GptModel
// (the same blocks, roundings and head: device_block.h), its activations in
// device memory, on one compute stream. What every device model shares
// (staging of host buffers, the bookkeeping of blocks) is device_decoder.h's.
//
// The step engine keeps its units and gradients in
// memory_space() when its group takes device buffers (NCCL) or there is
// one worker, so nothing crosses the bus per call; with a host-memory
// group (Gloo, nccl-host) it passes host buffers, which are staged.
//
// Parameter dtypes: BF16 (compute BF16) and FP32 (compute FP32); FP16 is
// refused (train in bf16 on a GPU).
//
//   ASSIGN_OR_RETURN(auto model, DeviceGptModel::Create(layout, shape,
//                    DType::kBf16, policy, /*device=*/0));
//   RETURN_IF_ERROR(model->Begin(B, T, tokens, targets));  // then as gpt.h
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_GPT_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_GPT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "model/cuda/device_block.h"
#include "model/cuda/device_decoder.h"
#include "model/gpt_manifest.h"

namespace zeroshard::model {

class DeviceGptModel final : public DeviceDecoderModel<DeviceBlockActs> {
 public:
  // `attention`: how the blocks run attention (device_block.h).
  static absl::StatusOr<std::unique_ptr<DeviceGptModel>> Create(
      const FlatLayout& layout, const GptShape& shape, DType param_dtype,
      const CheckpointPolicy& policy, int device,
      DeviceAttention attention = DeviceAttention::kProbs);
  ~DeviceGptModel() override;

  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override;

 private:
  DeviceGptModel() = default;
  // wte[token] + wpe[position].
  absl::Status EmbedTokens(const DeviceUnitWeights& w, float* x) override;
  absl::Status ForwardBlock(const DeviceUnitWeights& w, const DeviceBuffer& in,
                            DeviceBuffer* out, DeviceBlockActs* acts) override;
  absl::Status BackwardBlock(const DeviceUnitWeights& w, const DeviceBuffer& in,
                             const DeviceBlockActs& acts, const float* dy,
                             float* dx, float* grad) override;
  int64_t block_scratch_bytes() const override {
    return runner_ != nullptr ? runner_->scratch_bytes() : 0;
  }
  void set_block_timer(kernels::cuda::OpTimer* timer) override {
    runner_->set_timer(timer);
  }
  // ln_f (its mean and rstd kept in head_[kHeadOwn]) and the tied head.
  absl::Status FinalNormForward(const DeviceUnitWeights& wf, const float* x,
                                float* normed) override;
  absl::Status FinalNormBackward(const DeviceUnitWeights& wf, const float* dn,
                                 const float* x, float* dx,
                                 float* grad) override;
  kernels::cuda::DeviceTensor HeadMatrix(const DeviceUnitWeights& wf,
                                         const DeviceUnitWeights& we) const override {
    return we.Matrix(0);
  }
  float* HeadGrad(const DeviceUnitWeights& wf, const DeviceUnitWeights& we,
                  float* gf, float* ge) const override {
    return ge + we.offset[0];
  }
  absl::Status EmbeddingGrad(float* grad) override;

  std::unique_ptr<DeviceBlockRunner> runner_;
  BlockDims dims_;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_GPT_H_
