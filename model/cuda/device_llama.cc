#include "model/cuda/device_llama.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/attention_shape.h"
#include "model/kernels/cpu/rope.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/flash_attention.h"
#include "model/kernels/cuda/llama_ops.h"
#include "model/kernels/gemm_desc.h"
#include "model/kernels/online_softmax.h"
#include "model/llama.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;

// The model's own scratch slots (DeviceDecoderBase::head_).
enum : int { kLlHeadX, kLlHeadN, kLlHeadLogits, kLlHeadRstd, kLlHeadNq };

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLlamaModel>> DeviceLlamaModel::Create(
    const FlatLayout& layout, const ModelShape& shape, DType param_dtype,
    const CheckpointPolicy& policy, int device, DeviceAttention attention) {
  if (param_dtype == DType::kFp16) {
    return absl::InvalidArgumentError(
        "the CUDA model trains in bf16 or fp32; fp16 (with loss scaling) runs "
        "on the CPU path only: set bf16 in the config, or --device=cpu");
  }
  // The same checks as the CPU model (shape, policy, dtype, layout).
  RETURN_IF_ERROR(LlamaModel::Create(layout, shape, param_dtype, policy).status());
  const LlamaDims dims = LlamaDimsOf(shape);
  const kernels::AttentionShape as{1, dims.context, dims.heads * dims.head_dim,
                                   dims.heads, param_dtype};
  if (attention == DeviceAttention::kOnline) {
    RETURN_IF_ERROR(kernels::CheckOnlineAttentionShape(as));
  }
  if (attention == DeviceAttention::kFlash) {
    RETURN_IF_ERROR(k::CheckFlashAttentionShape(as));
  }
  std::unique_ptr<DeviceLlamaModel> m(new DeviceLlamaModel());
  RETURN_IF_ERROR(
      m->InitDecoder(layout, shape.layers, param_dtype, policy, device));
  m->shape_ = shape;
  m->dims_ = dims;
  m->runner_ = std::make_unique<DeviceLlamaBlockRunner>(m->gemm_.get(),
                                                        m->stream_, attention);
  return m;
}

DeviceLlamaModel::~DeviceLlamaModel() {
  // The runner's and the rotary tables' memory is freed before the base's
  // teardown: nothing on the stream may still use it.
  Select().IgnoreError();
  Clear();
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
}

int64_t DeviceLlamaModel::block_scratch_bytes() const {
  int64_t total = runner_ != nullptr ? runner_->scratch_bytes() : 0;
  for (const auto& [seq, r] : ropes_) {
    total += static_cast<int64_t>(r->cos.bytes() + r->sin.bytes());
  }
  return total;
}

absl::StatusOr<DeviceRope> DeviceLlamaModel::RopeFor(int64_t seq) {
  auto it = ropes_.find(seq);
  if (it == ropes_.end()) {
    ASSIGN_OR_RETURN(kernels::cpu::RopeTable t,
                     kernels::cpu::RopeTable::Make(seq, dims_.head_dim,
                                                   dims_.rope_theta));
    auto r = std::make_unique<RopeOnDevice>();
    const size_t bytes = t.cos.size() * sizeof(float);
    RETURN_IF_ERROR(r->cos.Reserve(bytes, stream_));
    RETURN_IF_ERROR(r->sin.Reserve(bytes, stream_));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(r->cos.data(), t.cos.data(), bytes,
                                               cudaMemcpyHostToDevice, stream_),
                               "copying the rotary table"));
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(r->sin.data(), t.sin.data(), bytes,
                                               cudaMemcpyHostToDevice, stream_),
                               "copying the rotary table"));
    // `t` is the copies' source: it must outlive them.
    RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_),
                               "waiting for the rotary table"));
    r->view = {.seq = seq,
               .head_dim = dims_.head_dim,
               .cos = static_cast<const float*>(r->cos.data()),
               .sin = static_cast<const float*>(r->sin.data())};
    it = ropes_.emplace(seq, std::move(r)).first;
  }
  return it->second->view;
}

absl::Status DeviceLlamaModel::Begin(int batch, int seq,
                                     absl::Span<const int32_t> tokens,
                                     absl::Span<const int32_t> targets) {
  RETURN_IF_ERROR(Select());
  Mark("host gaps");
  Clear();
  // Tokens checked here: the device kernels cannot report a bad one.
  RETURN_IF_ERROR(ValidateMicroBatch(shape_, batch, seq, tokens, targets));
  RETURN_IF_ERROR(CopyBatch(tokens, targets));
  ASSIGN_OR_RETURN(rope_, RopeFor(seq));
  block_ = LlamaBlockDims{.batch = batch,
                          .seq = seq,
                          .width = dims_.width,
                          .heads = dims_.heads,
                          .kv_heads = dims_.kv_heads,
                          .head_dim = dims_.head_dim,
                          .mlp_width = dims_.mlp_width,
                          .norm_eps = static_cast<float>(dims_.norm_eps),
                          .dtype = ComputeDType(param_dtype_),
                          .rope = nullptr};
  phase_ = Phase::kForward;
  next_ = -1;  // embedding first
  return absl::OkStatus();
}

absl::Status DeviceLlamaModel::EmbeddingForward(const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "EmbeddingForward"));
  if (next_ != -1) {
    return absl::FailedPreconditionError("EmbeddingForward called twice");
  }
  Mark("host gaps");
  ASSIGN_OR_RETURN(DeviceUnitWeights w, Weights(embedding_unit(), embedding, 0));
  Mark("param and grad staging");
  const int64_t M = block_.rows(), C = dims_.width;
  RETURN_IF_ERROR(head_[kLlHeadX].Reserve(M * C * sizeof(float), stream_));
  float* x = static_cast<float*>(head_[kLlHeadX].data());
  RETURN_IF_ERROR(k::TokenEmbeddingForward(tokens_device(), M, C, dims_.vocab,
                                           w.Vector(0), x, stream_));
  Mark("embedding");
  ASSIGN_OR_RETURN(inputs_[0],
                   DeviceBuffer::Allocate(mem_.get(), block_.dtype, M * C, stream_));
  RETURN_IF_ERROR(inputs_[0].FromFloat(x));
  Mark("casts");
  next_ = 0;
  return absl::OkStatus();
}

absl::Status DeviceLlamaModel::ForwardBlock(const DeviceUnitWeights& w,
                                            const DeviceBuffer& in,
                                            DeviceBuffer* out,
                                            DeviceLlamaActs* acts) {
  return runner_->Forward(block_, rope_, w, in, out, acts, mem_.get());
}

absl::Status DeviceLlamaModel::BackwardBlock(const DeviceUnitWeights& w,
                                             const DeviceBuffer& in,
                                             const DeviceLlamaActs& acts,
                                             const float* dy, float* dx,
                                             float* grad) {
  return runner_->Backward(block_, rope_, w, in, acts, dy, dx, grad);
}

k::DeviceTensor DeviceLlamaModel::Head(const DeviceUnitWeights& wf,
                                       const DeviceUnitWeights& we) const {
  return dims_.tie_embeddings ? we.Matrix(0) : wf.Matrix(1);
}

absl::Status DeviceLlamaModel::FinalHeadForward(const DeviceUnitWeights& wf,
                                                const DeviceUnitWeights& we) {
  const int64_t M = block_.rows(), C = dims_.width, V = dims_.vocab;
  const DType dt = block_.dtype;
  RETURN_IF_ERROR(head_[kLlHeadX].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kLlHeadN].Reserve(M * C * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kLlHeadRstd].Reserve(M * sizeof(float), stream_));
  RETURN_IF_ERROR(head_[kLlHeadNq].Reserve(M * C * DTypeSize(dt), stream_));
  // Logits, then (BF16) their gradient rounded for the two products: room
  // for both.
  RETURN_IF_ERROR(head_[kLlHeadLogits].Reserve(
      M * V * (sizeof(float) + (dt == DType::kBf16 ? 2 : 0)), stream_));
  float* x = static_cast<float*>(head_[kLlHeadX].data());
  float* n = static_cast<float*>(head_[kLlHeadN].data());
  float* rstd = static_cast<float*>(head_[kLlHeadRstd].data());
  RETURN_IF_ERROR(inputs_[layers_].ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::RmsNormForward(x, wf.Vector(0), M, C, block_.norm_eps, n,
                                    rstd, stream_));
  Mark("rmsnorm fwd");
  void* nq = head_[kLlHeadNq].data();
  if (dt == DType::kBf16) {
    RETURN_IF_ERROR(k::FloatsToBf16(n, static_cast<uint16_t*>(nq), M * C, stream_));
  } else {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(nq, n, M * C * sizeof(float),
                                               cudaMemcpyDeviceToDevice, stream_),
                               "copying the final norm"));
  }
  Mark("casts");
  const k::DeviceTensor head = Head(wf, we);
  // logits[M, V] = n head^T
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = V, .k = C,
                              .a = {nq, dt, C, false},
                              .b = {head.data, head.dtype, C, true},
                              .c = static_cast<float*>(head_[kLlHeadLogits].data()),
                              .ldc = V},
                             stream_));
  Mark("head matmul fwd");
  return absl::OkStatus();
}

absl::StatusOr<double> DeviceLlamaModel::FinalForwardBackward(
    const UnitParams& final_params, const UnitParams& embedding,
    float loss_scale, absl::Span<float> final_grad,
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardBackward"));
  if (next_ != layers_) {
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
  const int64_t M = block_.rows(), C = dims_.width, V = dims_.vocab;
  const DType dt = block_.dtype;
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  float* dlogits = static_cast<float*>(head_[kLlHeadLogits].data());
  ASSIGN_OR_RETURN(const double loss, Loss(dlogits, M, V, loss_scale));
  float* n = static_cast<float*>(head_[kLlHeadN].data());
  float* x = static_cast<float*>(head_[kLlHeadX].data());
  float* rstd = static_cast<float*>(head_[kLlHeadRstd].data());
  // Against BF16 operands the FP32 dlogits is rounded to BF16 first, as the
  // CPU's mixed-dtype product does (model/kernels/cpu/gemm.h).
  kernels::MatRef dl{dlogits, DType::kFp32, V, false};
  if (dt == DType::kBf16) {
    auto* q = reinterpret_cast<uint16_t*>(dlogits + M * V);
    RETURN_IF_ERROR(k::FloatsToBf16(dlogits, q, M * V, stream_));
    dl = {q, DType::kBf16, V, false};
    Mark("casts");
  }
  const k::DeviceTensor head = Head(wf, we);
  float* dhead = dims_.tie_embeddings ? ge.device + we.offset[0]
                                      : gf.device + wf.offset[1];
  // d n = dlogits head (into n, no longer needed); d head += dlogits^T nq.
  RETURN_IF_ERROR(gemm_->Run({.m = M, .n = C, .k = V,
                              .a = dl,
                              .b = {head.data, head.dtype, C, false},
                              .c = n, .ldc = C},
                             stream_));
  kernels::MatRef dlt = dl;
  dlt.trans = true;
  RETURN_IF_ERROR(gemm_->Run({.m = V, .n = C, .k = M,
                              .a = dlt,
                              .b = {head_[kLlHeadNq].data(), dt, C, false},
                              .c = dhead, .ldc = C, .accumulate = true},
                             stream_));
  Mark("head matmul bwd");
  ASSIGN_OR_RETURN(dx_, DeviceBuffer::Allocate(mem_.get(), DType::kFp32, M * C,
                                               stream_));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(dx_.data(), 0, M * C * sizeof(float), stream_),
      "zeroing dx"));
  Mark("copies");
  RETURN_IF_ERROR(k::RmsNormBackward(n, x, wf.Vector(0), rstd, M, C, dx_.f32(),
                                     gf.device + wf.offset[0], stream_));
  Mark("rmsnorm bwd");
  RETURN_IF_ERROR(FinishGrad(gf));
  RETURN_IF_ERROR(FinishGrad(ge));
  Mark("param and grad staging");
  inputs_[layers_].Release();
  phase_ = Phase::kBackward;
  next_ = layers_ - 1;
  if (next_ < 0) phase_ = Phase::kEmbeddingBackward;
  return loss;
}

absl::StatusOr<double> DeviceLlamaModel::FinalForwardLoss(
    const UnitParams& final_params, const UnitParams& embedding) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kForward, "FinalForwardLoss"));
  if (next_ != layers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FinalForwardLoss called before block ", next_, " ran forward"));
  }
  ASSIGN_OR_RETURN(DeviceUnitWeights wf, Weights(final_unit(), final_params, 0));
  ASSIGN_OR_RETURN(DeviceUnitWeights we, Weights(embedding_unit(), embedding, 1));
  RETURN_IF_ERROR(FinalHeadForward(wf, we));
  ASSIGN_OR_RETURN(const double loss,
                   Loss(static_cast<float*>(head_[kLlHeadLogits].data()),
                        block_.rows(), dims_.vocab, 1.0f));
  Clear();
  return loss;
}

absl::Status DeviceLlamaModel::EmbeddingBackward(
    absl::Span<float> embedding_grad) {
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CheckPhase(Phase::kEmbeddingBackward, "EmbeddingBackward"));
  Mark("host gaps");
  ASSIGN_OR_RETURN(GradTarget g, StageGrad(embedding_unit(), embedding_grad, 0));
  Mark("param and grad staging");
  const UnitInfo& u = layout_->units()[embedding_unit()];
  const uint64_t table = layout_->tensors()[u.tensors[0]].offset - u.offset;
  RETURN_IF_ERROR(k::TokenEmbeddingBackward(dx_.f32(), tokens_device(),
                                            block_.rows(), dims_.width,
                                            dims_.vocab, g.device + table, stream_));
  Mark("embedding");
  RETURN_IF_ERROR(FinishGrad(g));
  Mark("param and grad staging");
  Clear();
  return absl::OkStatus();
}

}  // namespace zeroshard::model
