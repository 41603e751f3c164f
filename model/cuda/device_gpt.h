// GPT-2 on a CUDA device, unit by unit: the UnitModel API (unit_model.h; the
// call order and contracts are gpt.h's) with the computation of GptModel
// (the same blocks, roundings and head: device_block.h), its activations in
// device memory, on one compute stream.
//
// Parameters (UnitParams) and gradients may be host or device memory: a
// host unit is copied to a device staging slot before use, and a host
// gradient span is copied to the device, accumulated into there, and copied
// back before the call returns, so the engine's contract (+= into its
// buffers) holds either way. Device buffers (and pinned host ones, whose
// copies are asynchronous) are used by work that may still run when a call
// returns: call Synchronize() (or take a fence of memory_space()) before
// reusing or reading them. The step engine keeps its units and gradients in
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

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gpt_manifest.h"
#include "common/layout.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/linear.h"
#include "model/kernels/cuda/op_timer.h"
#include "model/cuda/device_arch.h"
#include "model/cuda/device_block.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_memory.h"
#include "model/unit_model.h"

namespace zeroshard::model {


class DeviceGptModel final : public UnitModel {
 public:
  // `attention`: how the blocks run attention (device_block.h).
  static absl::StatusOr<std::unique_ptr<DeviceGptModel>> Create(
      const FlatLayout& layout, const GptShape& shape, DType param_dtype,
      const CheckpointPolicy& policy, int device,
      DeviceAttention attention = DeviceAttention::kProbs);
  ~DeviceGptModel() override;

  int num_blocks() const override { return shape_.layers; }
  DType param_dtype() const override { return param_dtype_; }
  const CheckpointPolicy& policy() const override { return policy_; }
  const char* device_name() const override { return device_name_.c_str(); }

  absl::Status Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                     absl::Span<const int32_t> targets) override;
  absl::Status EmbeddingForward(const UnitParams& embedding) override;
  absl::Status BlockForward(int l, const UnitParams& block) override;
  absl::StatusOr<double> FinalForwardBackward(
      const UnitParams& final_params, const UnitParams& embedding,
      float loss_scale, absl::Span<float> final_grad,
      absl::Span<float> embedding_grad) override;
  absl::StatusOr<double> FinalForwardLoss(const UnitParams& final_params,
                                          const UnitParams& embedding) override;
  bool NeedsRecompute(int l) const override;
  int RecomputeStart(int l) const override;
  absl::Status RecomputeBlock(int j, const UnitParams& block) override;
  absl::Status BlockBackward(int l, const UnitParams& block,
                             absl::Span<float> grad) override;
  absl::Status EmbeddingBackward(absl::Span<float> embedding_grad) override;

  const ActivationMemory& memory() const override { return *mem_; }
  void ResetPeak() override { mem_->ResetPeak(); }
  absl::Status Synchronize() override;
  // The device's memory, ordered with the compute stream: the engine keeps
  // units and gradients there when its group takes device buffers.
  ModelMemory* memory_space() override { return memory_.get(); }

  cudaStream_t stream() const { return stream_; }
  // Device bytes of the staging slots and scratch (not activations).
  int64_t workspace_bytes() const;
  // Marks every op of the step on `timer`, started on stream() (null:
  // none; model/kernels/cuda/op_timer.h). Host time between the model's
  // calls, when the device waits for work, is marked "host gaps".
  void set_op_timer(kernels::cuda::OpTimer* timer);

 private:
  // A unit's parameters on the device (copied there when given on the host)
  // and its FP32 vectors.
  struct Slot {
    DeviceScratch params, f32;
  };
  // A unit's gradient on the device: the caller's span, or a staged copy
  // of it written back by FinishGrad.
  struct GradTarget {
    float* device = nullptr;
    float* host = nullptr;  // non-null when staged
    size_t n = 0;
  };

  DeviceGptModel() = default;
  // Makes the model's device current on the calling thread (the CUDA
  // runtime's current device is per thread); every public call starts so.
  absl::Status Select() const;
  absl::StatusOr<DeviceUnitWeights> Weights(int unit, const UnitParams& p,
                                            int slot);
  absl::StatusOr<GradTarget> StageGrad(int unit, absl::Span<float> grad,
                                       int slot);
  absl::Status FinishGrad(const GradTarget& g);
  void Clear();
  // ln_f + tied head into logits_ (FP32 [M, V]); ln (FP32), lnq (compute
  // dtype), mean, rstd kept for the backward.
  absl::Status FinalHeadForward(const DeviceUnitWeights& wf,
                                const DeviceUnitWeights& we);
  absl::StatusOr<double> Loss(float loss_scale);

  std::shared_ptr<const FlatLayout> layout_;
  GptShape shape_;
  DType param_dtype_ = DType::kBf16;
  CheckpointPolicy policy_;
  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  kernels::cuda::OpTimer* timer_ = nullptr;
  void Mark(const char* label) const { kernels::cuda::MarkOp(timer_, label); }
  std::unique_ptr<kernels::cuda::CublasLtGemm> gemm_;
  std::unique_ptr<DeviceBlockRunner> runner_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<ActivationMemory> mem_ = std::make_unique<ActivationMemory>();
  Slot slots_[2];
  DeviceScratch grad_stage_[2];
  DeviceScratch tokens_d_, targets_d_, loss_d_;
  DeviceScratch head_[5];  // x, ln, logits, mean/rstd, lnq
  BlockDims dims_;
  int next_ = 0;
  std::vector<DeviceBuffer> inputs_;  // [L + 1]
  std::vector<DeviceBlockActs> acts_;  // [L]
  DeviceBuffer dx_;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_GPT_H_
