#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/kernels/cpu/cpu_kernels.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cpu;

}  // namespace

absl::StatusOr<LlamaModel> LlamaModel::Create(const FlatLayout& layout,
                                              const ModelShape& shape,
                                              DType param_dtype,
                                              const CheckpointPolicy& policy) {
  RETURN_IF_ERROR(ValidateLlamaShape(shape));
  RETURN_IF_ERROR(policy.Validate());
  if (param_dtype != DType::kFp32 && param_dtype != DType::kBf16 &&
      param_dtype != DType::kFp16) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported parameter dtype ", DTypeName(param_dtype)));
  }
  ASSIGN_OR_RETURN(ModelManifest want, MakeLlamaManifest(shape, 1));
  if (FirstDifferingUnit(layout.manifest(), want).has_value()) {
    return absl::InvalidArgumentError(
        "the flat layout is not the Llama manifest of this model shape");
  }
  LlamaModel m;
  m.InitDecoder(layout, shape.layers, param_dtype, policy);
  m.shape_ = shape;
  m.dims_ = LlamaDimsOf(shape);
  return m;
}

absl::Status LlamaModel::Begin(int batch, int seq, absl::Span<const int32_t> tokens,
                               absl::Span<const int32_t> targets) {
  Clear();
  RETURN_IF_ERROR(ValidateMicroBatch(shape_, batch, seq, tokens, targets));
  auto table = rope_.find(seq);
  if (table == rope_.end()) {
    ASSIGN_OR_RETURN(k::RopeTable t, k::RopeTable::Make(seq, dims_.head_dim, dims_.rope_theta));
    table = rope_.emplace(seq, std::move(t)).first;
  }
  tokens_.assign(tokens.begin(), tokens.end());
  targets_.assign(targets.begin(), targets.end());
  block_ = LlamaBlockDimsOf(dims_, batch, seq, ComputeDType(param_dtype_),
                            &table->second);
  phase_ = Phase::kForward;
  next_ = -1;  // embedding first
  return absl::OkStatus();
}

absl::Status LlamaModel::EmbeddingForward(const UnitParams& embedding) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "EmbeddingForward"));
  if (next_ != -1) return absl::FailedPreconditionError("EmbeddingForward called twice");
  ASSIGN_OR_RETURN(UnitWeights w, Weights(embedding_unit(), embedding));
  const int64_t M = block_.rows(), C = dims_.width;
  const float* table = w.Vector(0);
  std::vector<float> x(M * C);
  for (int64_t r = 0; r < M; ++r) {
    std::copy_n(table + static_cast<int64_t>(tokens_[r]) * C, C, x.data() + r * C);
  }
  inputs_[0] = ActBuffer(mem_.get(), block_.dtype, M * C);
  inputs_[0].FromFloat(x.data());
  next_ = 0;
  return absl::OkStatus();
}

absl::Status LlamaModel::ForwardBlock(const UnitWeights& w, const ActBuffer& in,
                                      ActBuffer* out, LlamaBlockActs* acts) {
  return LlamaBlockForward(block_, w, in, out, acts, mem_.get());
}

absl::Status LlamaModel::BackwardBlock(const UnitWeights& w, const ActBuffer& in,
                                       const LlamaBlockActs& acts, const float* dy,
                                       float* dx, float* grad) {
  return LlamaBlockBackward(block_, w, in, acts, dy, dx, grad);
}

k::ConstTensor LlamaModel::Head(const UnitWeights& wf, const UnitWeights& we) const {
  return dims_.tie_embeddings ? we.Matrix(0) : wf.Matrix(1);
}

absl::Status LlamaModel::FinalHeadForward(const UnitWeights& wf, const UnitWeights& we,
                                          FinalActs* f) const {
  const int64_t M = block_.rows(), C = dims_.width, V = dims_.vocab;
  f->x.resize(M * C);
  f->n.resize(M * C);
  f->rstd.resize(M);
  f->logits.resize(M * V);
  inputs_[layers_].ToFloat(f->x.data());
  RETURN_IF_ERROR(k::RmsNormForward(f->x.data(), wf.Vector(0), M, C, block_.norm_eps,
                                    f->n.data(), f->rstd.data()));
  f->nq = ActBuffer(nullptr, block_.dtype, M * C);
  f->nq.FromFloat(f->n.data());
  const k::ConstTensor head = Head(wf, we);
  // logits[M, V] = n head^T
  return k::Gemm({.m = M, .n = V, .k = C,
                  .a = {f->nq.data(), f->nq.dtype(), C, false},
                  .b = {head.data, head.dtype, C, true},
                  .c = f->logits.data(), .ldc = V});
}

absl::StatusOr<double> LlamaModel::FinalForwardBackward(
    const UnitParams& final_params, const UnitParams& embedding, float loss_scale,
    absl::Span<float> final_grad, absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardBackward"));
  if (next_ != layers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardBackward called before block ", next_, " ran forward"));
  }
  if (!(loss_scale > 0.0f) || !std::isfinite(loss_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale must be positive and finite, got ", loss_scale));
  }
  RETURN_IF_ERROR(CheckGrad(final_unit(), final_grad));
  RETURN_IF_ERROR(CheckGrad(embedding_unit(), embedding_grad));
  ASSIGN_OR_RETURN(UnitWeights wf, Weights(final_unit(), final_params));
  ASSIGN_OR_RETURN(UnitWeights we, Weights(embedding_unit(), embedding));
  const int64_t M = block_.rows(), C = dims_.width, V = dims_.vocab;
  FinalActs f;
  RETURN_IF_ERROR(FinalHeadForward(wf, we, &f));
  const k::ConstTensor head = Head(wf, we);
  float* dhead = dims_.tie_embeddings ? embedding_grad.data() + we.offset(0)
                                      : final_grad.data() + wf.offset(1);
  double loss = 0;
  RETURN_IF_ERROR(k::SoftmaxCrossEntropy(f.logits.data(), targets_.data(), M, V,
                                         loss_scale, &loss, f.logits.data()));
  // d n = dlogits head; d head += dlogits^T n.
  RETURN_IF_ERROR(k::Gemm({.m = M, .n = C, .k = V,
                           .a = {f.logits.data(), DType::kFp32, V, false},
                           .b = {head.data, head.dtype, C, false},
                           .c = f.n.data(), .ldc = C}));
  RETURN_IF_ERROR(k::Gemm({.m = V, .n = C, .k = M,
                           .a = {f.logits.data(), DType::kFp32, V, true},
                           .b = {f.nq.data(), f.nq.dtype(), C, false},
                           .c = dhead, .ldc = C, .accumulate = true}));
  dx_ = ActBuffer(mem_.get(), DType::kFp32, M * C);
  std::fill(dx_.f32(), dx_.f32() + M * C, 0.0f);
  RETURN_IF_ERROR(k::RmsNormBackward(f.n.data(), f.x.data(), wf.Vector(0), f.rstd.data(),
                                     M, C, dx_.f32(), final_grad.data() + wf.offset(0)));
  inputs_[layers_].Release();
  phase_ = Phase::kBackward;
  next_ = layers_ - 1;
  if (next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return loss;
}

absl::StatusOr<double> LlamaModel::FinalForwardLoss(const UnitParams& final_params,
                                                    const UnitParams& embedding) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardLoss"));
  if (next_ != layers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardLoss called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(UnitWeights wf, Weights(final_unit(), final_params));
  ASSIGN_OR_RETURN(UnitWeights we, Weights(embedding_unit(), embedding));
  FinalActs f;
  RETURN_IF_ERROR(FinalHeadForward(wf, we, &f));
  double loss = 0;
  RETURN_IF_ERROR(k::SoftmaxCrossEntropy(f.logits.data(), targets_.data(), block_.rows(),
                                         dims_.vocab, 1.0f, &loss, f.logits.data()));
  Clear();
  return loss;
}

absl::StatusOr<std::vector<float>> LlamaModel::LastRowLogits(
    const UnitParams& final_params, const UnitParams& embedding) {
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "LastRowLogits"));
  if (next_ != layers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LastRowLogits called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(UnitWeights wf, Weights(final_unit(), final_params));
  ASSIGN_OR_RETURN(UnitWeights we, Weights(embedding_unit(), embedding));
  FinalActs f;
  RETURN_IF_ERROR(FinalHeadForward(wf, we, &f));
  const int64_t V = dims_.vocab;
  std::vector<float> last(f.logits.end() - V, f.logits.end());
  Clear();
  return last;
}

absl::Status LlamaModel::EmbeddingBackward(absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(CheckPhase(Phase::kEmbeddingBackward, "EmbeddingBackward"));
  RETURN_IF_ERROR(CheckGrad(embedding_unit(), embedding_grad));
  const UnitInfo& u = layout_->units()[embedding_unit()];
  float* table = embedding_grad.data() + (layout_->tensors()[u.tensors[0]].offset - u.offset);
  const int64_t M = block_.rows(), C = dims_.width;
  // In row order, so the sums are the same for any thread count.
  for (int64_t r = 0; r < M; ++r) {
    float* row = table + static_cast<int64_t>(tokens_[r]) * C;
    const float* d = dx_.f32() + r * C;
    for (int64_t c = 0; c < C; ++c) row[c] += d[c];
  }
  Clear();
  return absl::OkStatus();
}

}  // namespace zeroshard::model
