// What a decoder-only model on a CUDA device shares, whatever its blocks
// (the device twin of model/decoder_model.h): the device, its compute
// stream and cuBLASLt handle; a unit's parameters and gradients on the
// device, staged there when the engine gives host buffers; the micro-batch's
// tokens on the device; the block-by-block bookkeeping (which block runs
// next, the inputs kept under the checkpoint policy, each block's internals,
// their recompute, the gradient of the residual stream between blocks); and
// the final unit's flow (its norm, the head's product, the mean
// cross-entropy, their backward). DeviceGptModel (device_gpt.h) and
// DeviceLlamaModel (device_llama.h) give their block's forward and backward
// over `Acts`, their embedding, their final norm and which matrix is the
// head.
//
// Parameters (UnitParams) and gradients may be host or device memory: a
// host unit is copied to a device staging slot before use, and a host
// gradient span is copied to the device, accumulated into there, and copied
// back before the call returns, so the engine's contract (+= into its
// buffers) holds either way. Device buffers (and pinned host ones, whose
// copies are asynchronous) are used by work that may still run when a call
// returns: call Synchronize() (or take a fence of memory_space()) before
// reusing or reading them.
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_DECODER_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_DECODER_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/device_scratch.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/model_shape.h"
#include "model/checkpoint_policy.h"
#include "model/cuda/device_block.h"
#include "model/cuda/device_buffer.h"
#include "model/cuda/device_memory.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/op_timer.h"
#include "model/unit_model.h"

namespace zeroshard::model {

// The device, the staging, the micro-batch's tokens, the embedding's and the
// final unit's flow: everything but the blocks' internals.
class DeviceDecoderBase : public UnitModel {
 public:
  ~DeviceDecoderBase() override;

  int num_blocks() const override { return layers_; }
  DType param_dtype() const override { return param_dtype_; }
  const CheckpointPolicy& policy() const override { return policy_; }
  const char* device_name() const override { return device_name_.c_str(); }

  const ActivationMemory& memory() const override { return *mem_; }
  void ResetPeak() override { mem_->ResetPeak(); }
  absl::Status Synchronize() override;

  // The embedding's rows (EmbedTokens) as block 0's input.
  absl::Status EmbeddingForward(const UnitParams& embedding) override;
  // The final unit: the architecture's norm of x_L, logits = normed head^T,
  // the mean cross-entropy, then their backward into dx (the last block's
  // output gradient), the final unit's and the head's gradients.
  absl::StatusOr<double> FinalForwardBackward(
      const UnitParams& final_params, const UnitParams& embedding,
      float loss_scale, absl::Span<float> final_grad,
      absl::Span<float> embedding_grad) override;
  absl::StatusOr<double> FinalForwardLoss(const UnitParams& final_params,
                                          const UnitParams& embedding) override;
  absl::Status EmbeddingBackward(absl::Span<float> embedding_grad) override;

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

 protected:
  // A unit's gradient on the device: the caller's span, or a staged copy
  // of it written back by FinishGrad.
  struct GradTarget {
    float* device = nullptr;
    float* host = nullptr;  // non-null when staged
    size_t n = 0;
  };

  DeviceDecoderBase() = default;

  // The head scratch's slots (head_): the ones the final unit's flow uses,
  // then the model's own from kHeadOwn.
  enum HeadSlot : int { kHeadX, kHeadNormed, kHeadLogits, kHeadNormedQ, kHeadOwn };

  // After the model's own checks: selects `device` (checked against the
  // machine's count), makes the compute stream, tells the device's
  // stream-ordered pool to keep freed activations, and loads cuBLASLt.
  absl::Status InitDevice(const FlatLayout& layout, const ModelShape& shape,
                          DType param_dtype, const CheckpointPolicy& policy,
                          int device);
  // What Begin does for every model: the model's device, the micro-batch
  // checked (the device kernels cannot report a bad token) and copied, the
  // forward phase.
  absl::Status BeginBatch(int batch, int seq, absl::Span<const int32_t> tokens,
                          absl::Span<const int32_t> targets);
  // Drops the activations held; the idle phase.
  virtual void Clear();
  int64_t rows() const { return static_cast<int64_t>(batch_) * seq_; }

  // The architecture's embedding of the micro-batch's tokens into x (FP32
  // [rows, width]).
  virtual absl::Status EmbedTokens(const DeviceUnitWeights& w, float* x) = 0;
  // The architecture's final unit. Its norm of x (FP32 [rows, width]) into
  // `normed`, keeping what its backward needs (in head_[kHeadOwn...]).
  virtual absl::Status FinalNormForward(const DeviceUnitWeights& wf,
                                        const float* x, float* normed) = 0;
  // Its backward: dn, the gradient of `normed`, to dx (accumulated), the
  // final unit's gradient accumulated into grad (device, unit offsets).
  virtual absl::Status FinalNormBackward(const DeviceUnitWeights& wf,
                                         const float* dn, const float* x,
                                         float* dx, float* grad) = 0;
  // The head [vocab, width] in the compute dtype, and its gradient's place
  // in the final unit's (gf) or, tied, the embedding unit's (ge) gradient.
  virtual kernels::cuda::DeviceTensor HeadMatrix(
      const DeviceUnitWeights& wf, const DeviceUnitWeights& we) const = 0;
  virtual float* HeadGrad(const DeviceUnitWeights& wf,
                          const DeviceUnitWeights& we, float* gf,
                          float* ge) const = 0;
  // The embedding's backward from dx_ into the embedding unit's gradient
  // (device, unit offsets).
  virtual absl::Status EmbeddingGrad(float* grad) = 0;
  // Makes the model's device current on the calling thread (the CUDA
  // runtime's current device is per thread); every public call starts so.
  absl::Status Select() const;
  // Unit `unit`'s tensors on the device (staged into slot `slot` when `p`
  // is host memory): matrices in the compute dtype; vectors, and the
  // embedding unit's tables, in FP32 (as UnitWeights reads them).
  absl::StatusOr<DeviceUnitWeights> Weights(int unit, const UnitParams& p,
                                            int slot);
  absl::StatusOr<GradTarget> StageGrad(int unit, absl::Span<float> grad,
                                       int slot);
  absl::Status FinishGrad(const GradTarget& g);
  // Bytes of the derived model's own scratch (its block runner's).
  virtual int64_t block_scratch_bytes() const = 0;
  // The derived model's block runner takes the timer too.
  virtual void set_block_timer(kernels::cuda::OpTimer* timer) = 0;
  void Mark(const char* label) const { kernels::cuda::MarkOp(timer_, label); }
  const int32_t* tokens_device() const {
    return static_cast<const int32_t*>(tokens_d_.data());
  }
  const int32_t* targets_device() const {
    return static_cast<const int32_t*>(targets_d_.data());
  }

  std::shared_ptr<const FlatLayout> layout_;
  ModelShape shape_;
  int layers_ = 0;
  DType param_dtype_ = DType::kBf16;
  CheckpointPolicy policy_;
  int device_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  kernels::cuda::OpTimer* timer_ = nullptr;
  std::unique_ptr<kernels::cuda::CublasLtGemm> gemm_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<ActivationMemory> mem_ = std::make_unique<ActivationMemory>();
  // The model's own scratch outside the blocks (the embedding's and the
  // final unit's), by slots the model names.
  static constexpr int kHeadSlots = 6;
  DeviceScratch head_[kHeadSlots];
  int batch_ = 0, seq_ = 0;
  int next_ = 0;                      // next block to run forward / backward
  std::vector<DeviceBuffer> inputs_;  // [L + 1]: x_l, kept per policy
  DeviceBuffer dx_;  // FP32 gradient of the current block's output

 private:
  // Copies the micro-batch's tokens and targets (checked by the caller) to
  // the device.
  absl::Status CopyBatch(absl::Span<const int32_t> tokens,
                         absl::Span<const int32_t> targets);
  // The norm and the head's product into head_[kHeadLogits].
  absl::Status FinalHeadForward(const DeviceUnitWeights& wf,
                                const DeviceUnitWeights& we);
  // The micro-batch's mean cross-entropy from FP32 logits [rows, vocab]
  // against the targets, the logits replaced by their gradient (times
  // loss_scale); waits for it.
  absl::StatusOr<double> Loss(float* logits, int64_t rows, int64_t vocab,
                              float loss_scale);

  // A unit's parameters on the device (copied there when given on the host)
  // and its FP32 vectors.
  struct Slot {
    DeviceScratch params, f32;
  };
  Slot slots_[2];
  DeviceScratch grad_stage_[2];
  DeviceScratch tokens_d_, targets_d_, loss_d_;
};

// The block-by-block bookkeeping over a block's internals `Acts` (held(),
// Release()).
template <typename Acts>
class DeviceDecoderModel : public DeviceDecoderBase {
 public:
  ~DeviceDecoderModel() override {
    Select().IgnoreError();
    Clear();
  }

  absl::Status BlockForward(int l, const UnitParams& block) override {
    if (absl::Status s = Select(); !s.ok()) return s;
    if (absl::Status s = CheckPhase(Phase::kForward, "BlockForward"); !s.ok()) {
      return s;
    }
    if (l != next_) {
      return absl::FailedPreconditionError(
          absl::StrCat("BlockForward(", l, ") called; expected block ", next_));
    }
    Mark("host gaps");
    absl::StatusOr<DeviceUnitWeights> w = Weights(block_unit(l), block, 0);
    if (!w.ok()) return w.status();
    Mark("param and grad staging");
    Acts acts;
    if (absl::Status s = ForwardBlock(*w, inputs_[l], &inputs_[l + 1], &acts);
        !s.ok()) {
      return s;
    }
    if (policy_.KeepsInternals()) acts_[l] = std::move(acts);
    // Block inputs other than kept checkpoints are dropped once consumed;
    // x_L stays for the final unit.
    if (!policy_.KeepsInput(l)) inputs_[l].Release();
    ++next_;
    return absl::OkStatus();
  }

  bool NeedsRecompute(int l) const override {
    return l >= 0 && l < layers_ && !acts_[l].held();
  }
  int RecomputeStart(int l) const override {
    int j = std::clamp(l, 0, layers_ - 1);
    while (j > 0 && inputs_[j].empty()) --j;
    return j;
  }
  absl::Status RecomputeBlock(int j, const UnitParams& block) override {
    if (absl::Status s = Select(); !s.ok()) return s;
    if (absl::Status s = CheckPhase(Phase::kBackward, "RecomputeBlock"); !s.ok()) {
      return s;
    }
    if (j < 0 || j > next_ || inputs_[j].empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RecomputeBlock(", j,
          "): the block's input is not held (next backward is block ", next_,
          "; recompute from RecomputeStart)"));
    }
    Mark("host gaps");
    absl::StatusOr<DeviceUnitWeights> w = Weights(block_unit(j), block, 0);
    if (!w.ok()) return w.status();
    Mark("param and grad staging");
    DeviceBuffer out;
    Acts acts;
    if (absl::Status s = ForwardBlock(*w, inputs_[j], &out, &acts); !s.ok()) {
      return s;
    }
    acts_[j] = std::move(acts);
    if (j + 1 <= next_ && inputs_[j + 1].empty()) inputs_[j + 1] = std::move(out);
    return absl::OkStatus();
  }

  absl::Status BlockBackward(int l, const UnitParams& block,
                             absl::Span<float> grad) override {
    if (absl::Status s = Select(); !s.ok()) return s;
    if (absl::Status s = CheckPhase(Phase::kBackward, "BlockBackward"); !s.ok()) {
      return s;
    }
    if (l != next_) {
      return absl::FailedPreconditionError(
          absl::StrCat("BlockBackward(", l, ") called; expected block ", next_));
    }
    if (NeedsRecompute(l) || inputs_[l].empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "BlockBackward(", l,
          "): activations not held; call RecomputeBlock for blocks ",
          RecomputeStart(l), "..", l, " first"));
    }
    Mark("host gaps");
    absl::StatusOr<GradTarget> g = StageGrad(block_unit(l), grad, 0);
    if (!g.ok()) return g.status();
    absl::StatusOr<DeviceUnitWeights> w = Weights(block_unit(l), block, 0);
    if (!w.ok()) return w.status();
    Mark("param and grad staging");
    absl::StatusOr<DeviceBuffer> dx_in =
        DeviceBuffer::Allocate(mem_.get(), DType::kFp32, dx_.size(), stream_);
    if (!dx_in.ok()) return dx_in.status();
    if (absl::Status s = BackwardBlock(*w, inputs_[l], acts_[l], dx_.f32(),
                                       dx_in->f32(), g->device);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = FinishGrad(*g); !s.ok()) return s;
    Mark("param and grad staging");
    dx_ = *std::move(dx_in);
    acts_[l].Release();
    inputs_[l].Release();
    if (--next_ < 0) phase_ = Phase::kEmbeddingBackward;
    return absl::OkStatus();
  }

 protected:
  DeviceDecoderModel() = default;

  // The block's forward from `in` to `out` (allocated by it), its internals
  // in `acts`, enqueued on stream().
  virtual absl::Status ForwardBlock(const DeviceUnitWeights& w,
                                    const DeviceBuffer& in, DeviceBuffer* out,
                                    Acts* acts) = 0;
  // Its backward: dy, the gradient of its output (FP32, device), to dx, that
  // of `in` (written), its parameters' gradients accumulated into grad
  // (device FP32, the unit's offsets).
  virtual absl::Status BackwardBlock(const DeviceUnitWeights& w,
                                     const DeviceBuffer& in, const Acts& acts,
                                     const float* dy, float* dx,
                                     float* grad) = 0;

  // InitDevice, and room for the blocks' internals.
  absl::Status InitDecoder(const FlatLayout& layout, const ModelShape& shape,
                           DType param_dtype, const CheckpointPolicy& policy,
                           int device) {
    if (absl::Status s = InitDevice(layout, shape, param_dtype, policy, device);
        !s.ok()) {
      return s;
    }
    acts_.resize(shape.layers);
    return absl::OkStatus();
  }

  void Clear() override {
    for (Acts& a : acts_) a.Release();
    DeviceDecoderBase::Clear();
  }

  std::vector<Acts> acts_;  // [L]
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_DECODER_H_
