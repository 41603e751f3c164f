#include "model/unit_weights.h"

#include "absl/strings/str_cat.h"

namespace zeroshard::model {

DType ComputeDType(DType param_dtype) {
  return param_dtype == DType::kBf16 ? DType::kBf16 : DType::kFp32;
}

absl::StatusOr<UnitWeights> UnitWeights::Resolve(const FlatLayout& layout,
                                                  int unit,
                                                  const UnitParams& params) {
  if (unit < 0 || unit >= static_cast<int>(layout.units().size())) {
    return absl::InvalidArgumentError(absl::StrCat("unit index ", unit, " out of range"));
  }
  const UnitInfo& u = layout.units()[unit];
  if (params.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unit '", u.name, "': parameters are null"));
  }
  if (params.dtype != DType::kFp32 && params.dtype != DType::kBf16 &&
      params.dtype != DType::kFp16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit '", u.name, "': unsupported parameter dtype ", DTypeName(params.dtype)));
  }
  if (params.length < u.numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit '", u.name, "': parameter buffer has ", params.length,
        " elements, the unit needs ", u.numel));
  }
  UnitWeights w;
  w.params_ = params;
  w.compute_ = ComputeDType(params.dtype);
  for (int ti : u.tensors) {
    const TensorInfo& t = layout.tensors()[ti];
    const uint64_t off = t.offset - u.offset;
    w.offsets_.push_back(off);
    w.numels_.push_back(t.numel);
    std::vector<float> f;
    const bool is_matrix = t.shape.size() == 2;
    // The embedding unit's tables (GPT-2's wte and wpe, Llama's
    // embed_tokens) are read as FP32 rows too; a tied head reads wte as a
    // matrix in the compute dtype through Matrix().
    const bool table = unit == 0 && t.param_class == TensorClass::kEmbedding;
    const bool need_f32 = params.dtype != DType::kFp32 &&
                          (!is_matrix || params.dtype == DType::kFp16 || table);
    if (need_f32) {
      f.resize(t.numel);
      const uint16_t* src = static_cast<const uint16_t*>(params.data) + off;
      if (params.dtype == DType::kBf16) {
        Bf16ToFloatArray(src, f.data(), t.numel);
      } else {
        Fp16ToFloatArray(src, f.data(), t.numel);
      }
    }
    w.f32_.push_back(std::move(f));
  }
  return w;
}

kernels::cpu::ConstTensor UnitWeights::Matrix(int t) const {
  if (params_.dtype == compute_) {
    const char* base = static_cast<const char*>(params_.data);
    return {base + offsets_[t] * DTypeSize(params_.dtype), compute_};
  }
  return {f32_[t].data(), DType::kFp32};
}

const float* UnitWeights::Vector(int t) const {
  if (params_.dtype == DType::kFp32) {
    return static_cast<const float*>(params_.data) + offsets_[t];
  }
  return f32_[t].data();
}

}  // namespace zeroshard::model
