#include "model/gpt.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/kernels/cpu/cpu_kernels.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cpu;

}  // namespace

absl::StatusOr<GptModel> GptModel::Create(const FlatLayout& layout,
                                          const GptShape& shape,
                                          DType param_dtype,
                                          const CheckpointPolicy& policy) {
  RETURN_IF_ERROR(ValidateGptShape(shape));
  RETURN_IF_ERROR(policy.Validate());
  if (param_dtype != DType::kFp32 && param_dtype != DType::kBf16 &&
      param_dtype != DType::kFp16) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported parameter dtype ", DTypeName(param_dtype)));
  }
  // The layout must match the shape tensor by tensor.
  ASSIGN_OR_RETURN(ModelManifest want, MakeGptManifest(shape, 1));
  if (FirstDifferingUnit(layout.manifest(), want).has_value()) {
    return absl::InvalidArgumentError(
        "the flat layout is not the GPT manifest of this model shape");
  }
  GptModel m;
  m.InitDecoder(layout, shape.layers, param_dtype, policy);
  m.shape_ = shape;
  return m;
}

absl::Status GptModel::Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                             absl::Span<const int32_t> targets) {
  Clear();
  RETURN_IF_ERROR(ValidateMicroBatch(shape_, batch, seq, tokens, targets));
  tokens_.assign(tokens.begin(), tokens.end());
  targets_.assign(targets.begin(), targets.end());
  dims_ = BlockDims{batch, seq, shape_.width, shape_.heads, ComputeDType(param_dtype_)};
  phase_ = Phase::kForward;
  next_ = -1;  // embedding first
  return absl::OkStatus();
}

absl::Status GptModel::EmbeddingForward(const UnitParams& embedding) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "EmbeddingForward"));
  if (next_ != -1) return absl::FailedPreconditionError("EmbeddingForward called twice");
  ASSIGN_OR_RETURN(UnitWeights w, Weights(embedding_unit(), embedding));
  const int64_t M = dims_.rows(), C = dims_.width;
  std::vector<float> x(M * C);
  RETURN_IF_ERROR(k::EmbeddingForward(tokens_.data(), dims_.batch, dims_.seq, C,
                                      shape_.vocab, w.Vector(0), w.Vector(1), x.data()));
  inputs_[0] = ActBuffer(mem_.get(), dims_.dtype, M * C);
  inputs_[0].FromFloat(x.data());
  next_ = 0;
  return absl::OkStatus();
}

absl::Status GptModel::ForwardBlock(const UnitWeights& w, const ActBuffer& in,
                                   ActBuffer* out, BlockActs* acts) {
  return model::BlockForward(dims_, w, in, out, acts, mem_.get());
}

absl::Status GptModel::BackwardBlock(const UnitWeights& w, const ActBuffer& in,
                                    const BlockActs& acts, const float* dy, float* dx,
                                    float* grad) {
  return model::BlockBackward(dims_, w, in, acts, dy, dx, grad);
}

absl::Status GptModel::FinalHeadForward(const UnitWeights& wf, const UnitWeights& we,
                                        FinalActs* f) const {
  const int64_t M = dims_.rows(), C = dims_.width, V = shape_.vocab;
  f->x.resize(M * C);
  f->ln.resize(M * C);
  f->mean.resize(M);
  f->rstd.resize(M);
  f->logits.resize(M * V);
  inputs_[shape_.layers].ToFloat(f->x.data());
  RETURN_IF_ERROR(k::LayerNormForward(f->x.data(), wf.Vector(0), wf.Vector(1), M, C,
                                      f->ln.data(), f->mean.data(), f->rstd.data()));
  f->lnq = ActBuffer(nullptr, dims_.dtype, M * C);
  f->lnq.FromFloat(f->ln.data());
  const k::ConstTensor wte = we.Matrix(0);
  // logits[M,V] = ln_f(x) wte^T
  return k::Gemm({.m = M, .n = V, .k = C,
                  .a = {f->lnq.data(), f->lnq.dtype(), C, false},
                  .b = {wte.data, wte.dtype, C, true},
                  .c = f->logits.data(), .ldc = V});
}

absl::StatusOr<double> GptModel::FinalForwardBackward(
    const UnitParams& final_params, const UnitParams& embedding, float loss_scale,
    absl::Span<float> final_grad, absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardBackward"));
  if (next_ != shape_.layers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardBackward called before block ", next_, " ran forward"));
  }
  if (!(loss_scale > 0.0f) || !std::isfinite(loss_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("loss_scale must be positive and finite, got ", loss_scale));
  }
  RETURN_IF_ERROR(CheckGrad(final_unit(), final_grad));
  RETURN_IF_ERROR(CheckGrad(embedding_unit(), embedding_grad));
  ASSIGN_OR_RETURN(UnitWeights wf, Weights(final_unit(), final_params));
  ASSIGN_OR_RETURN(UnitWeights we, Weights(embedding_unit(), embedding));
  const int64_t M = dims_.rows(), C = dims_.width, V = shape_.vocab;
  FinalActs f;
  RETURN_IF_ERROR(FinalHeadForward(wf, we, &f));
  const k::ConstTensor wte = we.Matrix(0);
  double loss = 0;
  RETURN_IF_ERROR(k::SoftmaxCrossEntropy(f.logits.data(), targets_.data(), M, V,
                                         loss_scale, &loss, f.logits.data()));
  // d ln = dlogits wte; d wte += dlogits^T ln.
  RETURN_IF_ERROR(k::Gemm({.m = M, .n = C, .k = V,
                           .a = {f.logits.data(), DType::kFp32, V, false},
                           .b = {wte.data, wte.dtype, C, false},
                           .c = f.ln.data(), .ldc = C}));
  RETURN_IF_ERROR(k::Gemm({.m = V, .n = C, .k = M,
                           .a = {f.logits.data(), DType::kFp32, V, true},
                           .b = {f.lnq.data(), f.lnq.dtype(), C, false},
                           .c = embedding_grad.data() + we.offset(0), .ldc = C,
                           .accumulate = true}));
  dx_ = ActBuffer(mem_.get(), DType::kFp32, M * C);
  std::fill(dx_.f32(), dx_.f32() + M * C, 0.0f);
  RETURN_IF_ERROR(k::LayerNormBackward(f.ln.data(), f.x.data(), wf.Vector(0), f.mean.data(),
                                       f.rstd.data(), M, C, dx_.f32(),
                                       final_grad.data() + wf.offset(0),
                                       final_grad.data() + wf.offset(1)));
  inputs_[shape_.layers].Release();
  phase_ = Phase::kBackward;
  next_ = shape_.layers - 1;
  if (next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return loss;
}

absl::StatusOr<double> GptModel::FinalForwardLoss(const UnitParams& final_params,
                                                  const UnitParams& embedding) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardLoss"));
  if (next_ != shape_.layers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardLoss called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(UnitWeights wf, Weights(final_unit(), final_params));
  ASSIGN_OR_RETURN(UnitWeights we, Weights(embedding_unit(), embedding));
  const int64_t M = dims_.rows(), V = shape_.vocab;
  // The same ln_f, rounding and head as FinalForwardBackward.
  FinalActs f;
  RETURN_IF_ERROR(FinalHeadForward(wf, we, &f));
  double loss = 0;
  RETURN_IF_ERROR(k::SoftmaxCrossEntropy(f.logits.data(), targets_.data(), M, V, 1.0f,
                                         &loss, f.logits.data()));
  Clear();
  return loss;
}

absl::Status GptModel::EmbeddingBackward(absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(CheckPhase(Phase::kEmbeddingBackward, "EmbeddingBackward"));
  RETURN_IF_ERROR(CheckGrad(embedding_unit(), embedding_grad));
  const UnitInfo& u = layout_->units()[embedding_unit()];
  const uint64_t wte = layout_->tensors()[u.tensors[0]].offset - u.offset;
  const uint64_t wpe = layout_->tensors()[u.tensors[1]].offset - u.offset;
  RETURN_IF_ERROR(k::EmbeddingBackward(dx_.f32(), tokens_.data(), dims_.batch,
                                       dims_.seq, dims_.width, shape_.vocab,
                                       embedding_grad.data() + wte,
                                       embedding_grad.data() + wpe));
  Clear();
  return absl::OkStatus();
}

}  // namespace zeroshard::model
