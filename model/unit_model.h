// The unit-by-unit model API the step engine drives (model/gpt.h
// documents the call order and the contracts), implemented on the CPU by
// GptModel and on a CUDA device by DeviceGptModel
// (model/cuda/device_gpt.h). The engine holds a UnitModel and does
// not know which one runs.
//
// Parameters and gradients are the engine's buffers (UnitParams, FP32 spans
// indexed by the unit's tensor offsets). The CPU model reads and writes them
// in place; the device model also takes host buffers (it copies them to the
// device and the gradients back) or device buffers (used in place).
#ifndef ZEROSHARD_MODEL_UNIT_MODEL_H_
#define ZEROSHARD_MODEL_UNIT_MODEL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "model/gpt_manifest.h"
#include "model/activation_buffer.h"
#include "model/checkpoint_policy.h"
#include "model/model_memory.h"
#include "model/unit_weights.h"

namespace zeroshard::model {

// The checks both models' Begin makes before anything else: positive batch
// and seq with seq <= the context, batch * seq tokens and targets, each in
// [0, vocab) (INVALID_ARGUMENT naming what is wrong).
absl::Status ValidateMicroBatch(const GptShape& shape, int batch, int seq,
                                absl::Span<const int32_t> tokens,
                                absl::Span<const int32_t> targets);

class UnitModel {
 public:
  virtual ~UnitModel() = default;

  // Unit indices (model/gpt_manifest.h).
  static int embedding_unit() { return 0; }
  static int block_unit(int l) { return 1 + l; }
  virtual int num_blocks() const = 0;
  int final_unit() const { return num_blocks() + 1; }
  virtual DType param_dtype() const = 0;
  virtual const CheckpointPolicy& policy() const = 0;
  // "cpu" or "cuda:K".
  virtual const char* device_name() const = 0;

  virtual absl::Status Begin(int batch, int seq,
                             absl::Span<const int32_t> tokens,
                             absl::Span<const int32_t> targets) = 0;
  virtual absl::Status EmbeddingForward(const UnitParams& embedding) = 0;
  virtual absl::Status BlockForward(int l, const UnitParams& block) = 0;
  virtual absl::StatusOr<double> FinalForwardBackward(
      const UnitParams& final_params, const UnitParams& embedding,
      float loss_scale, absl::Span<float> final_grad,
      absl::Span<float> embedding_grad) = 0;
  virtual absl::StatusOr<double> FinalForwardLoss(
      const UnitParams& final_params, const UnitParams& embedding) = 0;
  virtual bool NeedsRecompute(int l) const = 0;
  virtual int RecomputeStart(int l) const = 0;
  virtual absl::Status RecomputeBlock(int j, const UnitParams& block) = 0;
  virtual absl::Status BlockBackward(int l, const UnitParams& block,
                                     absl::Span<float> grad) = 0;
  virtual absl::Status EmbeddingBackward(absl::Span<float> embedding_grad) = 0;

  // Waits until the model's work enqueued so far has finished (the CUDA
  // model's stream; the CPU model's calls finish before they return). A
  // caller that passes device or pinned buffers calls it before reusing or
  // reading them; pageable host buffers are free when a call returns.
  virtual absl::Status Synchronize() { return absl::OkStatus(); }

  // The memory the model computes in when it is not the host's (model_memory.h),
  // or null (the CPU model). The engine keeps its units and full-unit
  // gradients there when its group can reach it.
  virtual ModelMemory* memory_space() { return nullptr; }

  // Activation bytes held now and at the peak (host or device memory).
  virtual const ActivationMemory& memory() const = 0;
  virtual void ResetPeak() = 0;

 protected:
  // Where a micro-batch stands (the call order of gpt.h), and the check every
  // call makes against it: FAILED_PRECONDITION naming the call and both
  // phases.
  enum class Phase { kIdle, kForward, kBackward, kEmbeddingBackward };
  absl::Status CheckPhase(Phase want, const char* call) const;
  Phase phase_ = Phase::kIdle;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_UNIT_MODEL_H_
