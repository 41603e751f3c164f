#include "model/cuda/device_gpt.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/online_softmax.h"
#include "model/kernels/gemm_desc.h"
#include "model/gpt.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;
using kernels::MatRef;

// Head scratch slots.
enum : int { kHeadX, kHeadLn, kHeadLogits, kHeadStats, kHeadLnq };

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGptModel>> DeviceGptModel::Create(
    const FlatLayout& layout, const GptShape& shape, DType param_dtype,
    const CheckpointPolicy& policy, int device, DeviceAttention attention) {
  if (param_dtype == DType::kFp16) {
    return absl::InvalidArgumentError(
        "the CUDA model trains in bf16 or fp32; fp16 (with loss scaling) runs "
        "on the CPU path only: set bf16 in the config, or --device=cpu");
  }
  if (attention == DeviceAttention::kOnline) {
    // The shapes the online kernels are instantiated for.
    RETURN_IF_ERROR(kernels::CheckOnlineAttentionShape(
        {1, shape.context, shape.width, shape.heads, param_dtype}));
  }
  if (attention == DeviceAttention::kFlash) {
    RETURN_IF_ERROR(kernels::cuda::CheckFlashAttentionShape(
        {1, shape.context, shape.width, shape.heads, param_dtype}));
  }
  // The same checks as the CPU model (shape, policy, dtype, layout).
  RETURN_IF_ERROR(
      GptModel::Create(layout, shape, param_dtype, policy).status());
  std::unique_ptr<DeviceGptModel> m(new DeviceGptModel());
  RETURN_IF_ERROR(
      m->InitDecoder(layout, shape.layers, param_dtype, policy, device));
  m->shape_ = shape;
  m->runner_ = std::make_unique<DeviceBlockRunner>(m->gemm_.get(), m->stream_,
                                                   attention);
  return m;
}

DeviceGptModel::~DeviceGptModel() {
  // The runner's scratch is freed before the base's teardown: nothing on
  // the stream may still use it.
  Select().IgnoreError();
  Clear();
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
}

absl::Status DeviceGptModel::Begin(int batch, int seq,
                                   absl::Span<const int32_t> tokens,
                                   absl::Span<const int32_t> targets) {
  RETURN_IF_ERROR(Select());
  Mark("host gaps");
  Clear();
  // Tokens checked here: the device kernels cannot report a bad one.
  RETURN_IF_ERROR(ValidateMicroBatch(shape_, batch, seq, tokens, targets));
  RETURN_IF_ERROR(CopyBatch(tokens, targets));
  dims_ = BlockDims{batch, seq, shape_.width, shape_.heads,
                    ComputeDType(param_dtype_)};
  phase_ = Phase::kForward;
  next_ = -1;
  return absl::OkStatus();
}

absl::Status DeviceGptModel::EmbeddingForward(const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "EmbeddingForward"));
  if (next_ != -1) {
    return absl::FailedPreconditionError("EmbeddingForward called twice");
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(embedding_unit(), embedding, 0));
  Mark("param and grad staging");
  const int64_t M = dims_.rows(), C = dims_.width;
  RETURN_IF_ERROR(head_[kHeadX].Reserve(M * C * sizeof(float), stream_));
  float* x = static_cast<float*>(head_[kHeadX].data());
  RETURN_IF_ERROR(k::EmbeddingForward(
      tokens_device(), dims_.batch, dims_.seq, C, shape_.vocab, w.Vector(0),
      w.Vector(1), x, stream_));
  Mark("embedding");
  ASSIGN_OR_RETURN(inputs_[0],
                   DeviceBuffer::Allocate(mem_.get(), dims_.dtype, M * C, stream_));
  RETURN_IF_ERROR(inputs_[0].FromFloat(x));
  Mark("casts");
  next_ = 0;
  return absl::OkStatus();
}

absl::Status DeviceGptModel::ForwardBlock(const DeviceUnitWeights& w,
                                          const DeviceBuffer& in,
                                          DeviceBuffer* out,
                                          DeviceBlockActs* acts) {
  return runner_->Forward(dims_, w, in, out, acts, mem_.get());
}

absl::Status DeviceGptModel::BackwardBlock(const DeviceUnitWeights& w,
                                           const DeviceBuffer& in,
                                           const DeviceBlockActs& acts,
                                           const float* dy, float* dx,
                                           float* grad) {
  return runner_->Backward(dims_, w, in, acts, dy, dx, grad);
}

absl::Status DeviceGptModel::FinalHeadForward(const DeviceUnitWeights& wf,
                                              const DeviceUnitWeights& we) {
  const int64_t M = dims_.rows(), C = dims_.width, V = shape_.vocab;
  const DType dt = dims_.dtype;
  RETURN_IF_ERROR(head_[kHeadX].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadLn].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadStats].Reserve(2 * M * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kHeadLnq].Reserve(M * C * DTypeSize(dt), stream_));
  // Logits, then (BF16) their gradient rounded for the two products: room
  // for both.
  RETURN_IF_ERROR(head_[kHeadLogits].Reserve(
      M * V * (sizeof(float) + (dt == DType::kBf16 ? 2 : 0)), stream_));
  float* x = static_cast<float*>(head_[kHeadX].data());
  float* ln = static_cast<float*>(head_[kHeadLn].data());
  float* stats = static_cast<float*>(head_[kHeadStats].data());
  RETURN_IF_ERROR(inputs_[shape_.layers].ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::LayerNormForward(x, wf.Vector(0), wf.Vector(1), M, C, ln,
                                      stats, stats + M, stream_));
  Mark("layernorm fwd");
  void* lnq = head_[kHeadLnq].data();
  if (dt == DType::kBf16) {
    RETURN_IF_ERROR(
        k::FloatsToBf16(ln, static_cast<uint16_t*>(lnq), M * C, stream_));
  } else {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(lnq, ln, M * C * sizeof(float),
                                               cudaMemcpyDeviceToDevice,
                                               stream_),
                               "copying ln_f"));
  }
  Mark("casts");
  // logits[M,V] = ln_f(x) wte^T
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = V, .k = C,
                              .a = {lnq, dt, C, false},
                              .b = {we.matrix[0], dt, C, true},
                              .c = static_cast<float*>(head_[kHeadLogits].data()),
                              .ldc = V},
                             stream_));
  Mark("head matmul fwd");
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceGptModel::FinalForwardBackward(
    const UnitParams& final_params, const UnitParams& embedding,
    float loss_scale, absl::Span<float> final_grad,
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardBackward"));
  if (next_ != shape_.layers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardBackward called before block ", next_, " ran forward"));
  }
  if (!(loss_scale > 0.0f) || !std::isfinite(loss_scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss_scale must be positive and finite, got ", loss_scale));
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget gf, StageGrad(final_unit(), final_grad, 0));
  ASSIGN_OR_RETURN(GradTarget ge, StageGrad(embedding_unit(), embedding_grad, 1));
  ASSIGN_OR_RETURN(DeviceUnitWeights wf, Weights(final_unit(), final_params, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights we, Weights(embedding_unit(), embedding, 1));
  Mark("param and grad staging");
  const int64_t M = dims_.rows(), C = dims_.width, V = shape_.vocab;
  const DType dt = dims_.dtype;
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  ASSIGN_OR_RETURN(const double loss,
                   Loss(static_cast<float*>(head_[kHeadLogits].data()), M, V,
                        loss_scale));
  float* dlogits = static_cast<float*>(head_[kHeadLogits].data());
  float* ln = static_cast<float*>(head_[kHeadLn].data());
  float* x = static_cast<float*>(head_[kHeadX].data());
  float* stats = static_cast<float*>(head_[kHeadStats].data());
  // Against BF16 operands the FP32 dlogits is rounded to BF16 first, as the
  // CPU's mixed-dtype product does (model/kernels/cpu/gemm.h).
  MatRef dl{dlogits, DType::kFp32, V, false};
  if (dt == DType::kBf16) {
    auto* q = reinterpret_cast<uint16_t*>(dlogits + M * V);
    RETURN_IF_ERROR(k::FloatsToBf16(dlogits, q, M * V, stream_));
    dl = {q, DType::kBf16, V, false};
    Mark("casts");
  }
  // d ln = dlogits wte (into ln, no longer needed); d wte += dlogits^T lnq.
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = C, .k = V,
                              .a = dl,
                              .b = {we.matrix[0], dt, C, false},
                              .c = ln, .ldc = C},
                             stream_));
  MatRef dlt = dl;
  dlt.trans = true;
  RETURN_IF_ERROR(gemm_->Run({.m = V, .n = C, .k = M,
                              .a = dlt,
                              .b = {head_[kHeadLnq].data(), dt, C, false},
                              .c = ge.device + we.offset[0], .ldc = C,
                              .accumulate = true},
                             stream_));
  Mark("head matmul bwd");
  ASSIGN_OR_RETURN(dx_, DeviceBuffer::Allocate(mem_.get(), DType::kFp32, M * C,
                                               stream_));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(dx_.data(), 0, M * C * sizeof(float), stream_),
      "zeroing dx"));
  Mark("copies");
  RETURN_IF_ERROR(k::LayerNormBackward(ln, x, wf.Vector(0), stats, stats + M,
                                       M, C, dx_.f32(), gf.device + wf.offset[0],
                                       gf.device + wf.offset[1], stream_));
  Mark("layernorm bwd");
  RETURN_IF_ERROR(FinishGrad(gf));
  RETURN_IF_ERROR(FinishGrad(ge));
  Mark("param and grad staging");
  inputs_[shape_.layers].Release();
  phase_ = Phase::kBackward;
  next_ = shape_.layers - 1;
  if (next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return loss;
}

absl::StatusOr<double> DeviceGptModel::FinalForwardLoss(
    const UnitParams& final_params, const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardLoss"));
  if (next_ != shape_.layers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardLoss called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(DeviceUnitWeights wf, Weights(final_unit(), final_params, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights we, Weights(embedding_unit(), embedding, 1));
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  ASSIGN_OR_RETURN(const double loss,
                   Loss(static_cast<float*>(head_[kHeadLogits].data()),
                        dims_.rows(), shape_.vocab, 1.0f));
  Clear();
  return loss;
}

absl::Status DeviceGptModel::EmbeddingBackward(
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kEmbeddingBackward, "EmbeddingBackward"));
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget g, StageGrad(embedding_unit(), embedding_grad, 0));
  Mark("param and grad staging");
  const UnitInfo& u = layout_->units()[embedding_unit()];
  const uint64_t wte = layout_->tensors()[u.tensors[0]].offset - u.offset;
  const uint64_t wpe = layout_->tensors()[u.tensors[1]].offset - u.offset;
  RETURN_IF_ERROR(k::EmbeddingBackward(
      dx_.f32(), tokens_device(), dims_.batch, dims_.seq, dims_.width,
      shape_.vocab, g.device + wte, g.device + wpe, stream_));
  Mark("embedding");
  RETURN_IF_ERROR(FinishGrad(g));
  Mark("param and grad staging");
  Clear();
  return absl::OkStatus();
}

}  // namespace zeroshard::model
