// The block-by-block bookkeeping a decoder-only CPU model shares (the call
// order and contracts of model/gpt.h): which block runs next, the block
// inputs kept under the checkpoint policy, each block's internals for its
// backward, their recompute from the nearest kept input, and the gradient
// of the residual stream between blocks. A model (GptModel, LlamaModel)
// gives its block's forward and backward over `Acts`, its internals, and
// its own embedding and final unit.
//
//   class LlamaModel final : public DecoderModel<LlamaBlockActs> {
//     absl::Status ForwardBlock(const UnitWeights& w, const ActBuffer& in,
//                               ActBuffer* out, LlamaBlockActs* acts) override;
//     absl::Status BackwardBlock(...) override;
//     ...
//   };
//
// Acts has held() (its internals are there) and Release().
#ifndef ZEROSHARD_MODEL_DECODER_MODEL_H_
#define ZEROSHARD_MODEL_DECODER_MODEL_H_

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "model/activation_buffer.h"
#include "model/checkpoint_policy.h"
#include "model/unit_model.h"
#include "model/unit_weights.h"

namespace zeroshard::model {

template <typename Acts>
class DecoderModel : public UnitModel {
 public:
  int num_blocks() const override { return layers_; }
  DType param_dtype() const override { return param_dtype_; }
  const CheckpointPolicy& policy() const override { return policy_; }
  const char* device_name() const override { return "cpu"; }

  absl::Status BlockForward(int l, const UnitParams& block) override {
    if (absl::Status s = CheckPhase(Phase::kForward, "BlockForward"); !s.ok()) return s;
    if (l != next_) {
      return absl::FailedPreconditionError(
          absl::StrCat("BlockForward(", l, ") called; expected block ", next_));
    }
    absl::StatusOr<UnitWeights> w = Weights(block_unit(l), block);
    if (!w.ok()) return w.status();
    Acts acts;
    if (absl::Status s = ForwardBlock(*w, inputs_[l], &inputs_[l + 1], &acts); !s.ok()) {
      return s;
    }
    if (policy_.KeepsInternals()) acts_[l] = std::move(acts);
    // Block inputs other than kept checkpoints are dropped once consumed;
    // x_L stays for the final unit.
    if (!policy_.KeepsInput(l)) inputs_[l].Release();
    ++next_;
    return absl::OkStatus();
  }

  // Whether block l's internals are missing (must be recomputed first).
  bool NeedsRecompute(int l) const override {
    return l >= 0 && l < layers_ && !acts_[l].held();
  }
  // The first block to recompute before BlockBackward(l): the nearest block
  // j <= l whose input is held.
  int RecomputeStart(int l) const override {
    int j = std::clamp(l, 0, layers_ - 1);
    while (j > 0 && inputs_[j].empty()) --j;
    return j;
  }
  absl::Status RecomputeBlock(int j, const UnitParams& block) override {
    if (absl::Status s = CheckPhase(Phase::kBackward, "RecomputeBlock"); !s.ok()) return s;
    if (j < 0 || j > next_ || inputs_[j].empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RecomputeBlock(", j, "): the block's input is not held (next backward is block ",
          next_, "; recompute from RecomputeStart)"));
    }
    absl::StatusOr<UnitWeights> w = Weights(block_unit(j), block);
    if (!w.ok()) return w.status();
    ActBuffer out;
    Acts acts;
    if (absl::Status s = ForwardBlock(*w, inputs_[j], &out, &acts); !s.ok()) return s;
    acts_[j] = std::move(acts);
    if (j + 1 <= next_ && inputs_[j + 1].empty()) inputs_[j + 1] = std::move(out);
    return absl::OkStatus();
  }
  absl::Status BlockBackward(int l, const UnitParams& block,
                             absl::Span<float> grad) override {
    if (absl::Status s = CheckPhase(Phase::kBackward, "BlockBackward"); !s.ok()) return s;
    if (l != next_) {
      return absl::FailedPreconditionError(
          absl::StrCat("BlockBackward(", l, ") called; expected block ", next_));
    }
    if (NeedsRecompute(l) || inputs_[l].empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "BlockBackward(", l, "): activations not held; call RecomputeBlock for blocks ",
          RecomputeStart(l), "..", l, " first"));
    }
    if (absl::Status s = CheckGrad(block_unit(l), grad); !s.ok()) return s;
    absl::StatusOr<UnitWeights> w = Weights(block_unit(l), block);
    if (!w.ok()) return w.status();
    ActBuffer dx_in(mem_.get(), DType::kFp32, dx_.size());
    if (absl::Status s = BackwardBlock(*w, inputs_[l], acts_[l], dx_.f32(), dx_in.f32(),
                                       grad.data());
        !s.ok()) {
      return s;
    }
    dx_ = std::move(dx_in);
    acts_[l].Release();
    inputs_[l].Release();
    if (--next_ < 0) phase_ = Phase::kEmbeddingBackward;
    return absl::OkStatus();
  }

  // Bytes of activations held now and the peak since the last ResetPeak():
  // block inputs, block internals, the residual stream and its gradient
  // (not the transient FP32 scratch of the op being computed).
  const ActivationMemory& memory() const override { return *mem_; }
  void ResetPeak() override { mem_->ResetPeak(); }

 protected:
  DecoderModel() = default;

  // The block's forward from `in` to `out`, its internals in `acts`.
  virtual absl::Status ForwardBlock(const UnitWeights& w, const ActBuffer& in,
                                    ActBuffer* out, Acts* acts) = 0;
  // Its backward: dy, the gradient of its output (FP32), to dx, that of
  // `in` (written), its parameters' gradients accumulated into grad.
  virtual absl::Status BackwardBlock(const UnitWeights& w, const ActBuffer& in,
                                     const Acts& acts, const float* dy, float* dx,
                                     float* grad) = 0;

  // Sets up the bookkeeping for `layers` blocks.
  void InitDecoder(const FlatLayout& layout, int layers, DType param_dtype,
                   const CheckpointPolicy& policy) {
    layout_ = std::make_shared<const FlatLayout>(layout);
    layers_ = layers;
    param_dtype_ = param_dtype;
    policy_ = policy;
    inputs_.resize(layers + 1);
    acts_.resize(layers);
  }

  void Clear() {
    for (ActBuffer& b : inputs_) b.Release();
    for (Acts& a : acts_) a.Release();
    dx_.Release();
    phase_ = Phase::kIdle;
    next_ = 0;
  }

  absl::StatusOr<UnitWeights> Weights(int unit, const UnitParams& p) const {
    if (p.dtype != param_dtype_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit ", unit, ": parameters are ", DTypeName(p.dtype), ", the model trains in ",
          DTypeName(param_dtype_)));
    }
    return UnitWeights::Resolve(*layout_, unit, p);
  }

  absl::Status CheckGrad(int unit, absl::Span<float> grad) const {
    const UnitInfo& u = layout_->units()[unit];
    if (grad.data() == nullptr || grad.size() < u.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit '", u.name, "': gradient buffer has ", grad.size(),
          " elements, the unit needs ", u.numel));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const FlatLayout> layout_;
  int layers_ = 0;
  DType param_dtype_ = DType::kBf16;
  CheckpointPolicy policy_;
  std::unique_ptr<ActivationMemory> mem_ = std::make_unique<ActivationMemory>();
  int next_ = 0;                  // next block to run forward / backward
  std::vector<ActBuffer> inputs_; // [L + 1]: x_l, kept per policy
  std::vector<Acts> acts_;        // [L]
  ActBuffer dx_;                  // FP32 gradient of the current block output
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_DECODER_MODEL_H_
