// Views of one unit's parameters for the kernels.
//
// A unit's parameters arrive as one contiguous buffer (UnitParams) in the
// training dtype, laid out as common/layout.h says: tensor t of the unit
// starts at TensorInfo.offset - UnitInfo.offset; the buffer is at least the
// unit's numel long (normally its padded length). UnitWeights resolves each
// tensor to what the kernels read:
//   * matrices: a pointer into the buffer when the buffer's dtype is the
//     compute dtype (BF16 or FP32), else an FP32 copy (FP16 is widened);
//   * vectors (LayerNorm gains, biases) and the embedding tables: FP32
//     (copied when the buffer is not FP32).
// UnitParams' buffer must outlive the UnitWeights.
//
//   ASSIGN_OR_RETURN(UnitWeights w, UnitWeights::Resolve(layout, unit, params));
//   kernels::cpu::ConstTensor attn = w.Matrix(2);
//   const float* ln1_gain = w.Vector(0);
#ifndef ZEROSHARD_MODEL_UNIT_WEIGHTS_H_
#define ZEROSHARD_MODEL_UNIT_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "model/kernels/cpu/linear.h"

namespace zeroshard::model {

// One unit's parameters as gathered by the engine. `length` in elements.
struct UnitParams {
  const void* data = nullptr;
  uint64_t length = 0;
  DType dtype = DType::kBf16;
};

// The matrix dtype the kernels compute with for a parameter dtype: BF16 for
// BF16 training, FP32 for FP32 and FP16 (FP16 is widened on the CPU; the
// loss scale still applies, so the engine's FP16 logic is exercised).
DType ComputeDType(DType param_dtype);

class UnitWeights {
 public:
  // Validates the buffer (non-null, dtype fp32/bf16/fp16, long enough).
  static absl::StatusOr<UnitWeights> Resolve(const FlatLayout& layout, int unit,
                                             const UnitParams& params);

  int tensor_count() const { return static_cast<int>(offsets_.size()); }
  // Tensor t of the unit as a matrix in ComputeDType(params.dtype).
  kernels::cpu::ConstTensor Matrix(int t) const;
  // Tensor t of the unit in FP32.
  const float* Vector(int t) const;
  // Offset of tensor t inside the unit (for gradient buffers).
  uint64_t offset(int t) const { return offsets_[t]; }

 private:
  UnitParams params_;
  DType compute_ = DType::kFp32;
  std::vector<uint64_t> offsets_, numels_;
  std::vector<std::vector<float>> f32_;  // per tensor; empty when not needed
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_UNIT_WEIGHTS_H_
