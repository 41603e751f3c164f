#include "model/cuda/device_gpt.h"

#include "common/status_macros.h"
#include "model/gpt.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/online_softmax.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;

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
  RETURN_IF_ERROR(m->InitDecoder(layout, shape, param_dtype, policy, device));
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
  RETURN_IF_ERROR(BeginBatch(batch, seq, tokens, targets));
  dims_ = BlockDims{batch, seq, shape_.width, shape_.heads,
                    ComputeDType(param_dtype_)};
  return absl::OkStatus();
}

absl::Status DeviceGptModel::EmbedTokens(const DeviceUnitWeights& w, float* x) {
  return k::EmbeddingForward(tokens_device(), dims_.batch, dims_.seq,
                             shape_.width, shape_.vocab, w.Vector(0),
                             w.Vector(1), x, stream_);
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

absl::Status DeviceGptModel::FinalNormForward(const DeviceUnitWeights& wf,
                                              const float* x, float* normed) {
  const int64_t M = rows(), C = shape_.width;
  RETURN_IF_ERROR(head_[kHeadOwn].Reserve(2 * M * sizeof(float), stream_));
  float* stats = static_cast<float*>(head_[kHeadOwn].data());  // mean, rstd
  RETURN_IF_ERROR(k::LayerNormForward(x, wf.Vector(0), wf.Vector(1), M, C,
                                      normed, stats, stats + M, stream_));
  Mark("layernorm fwd");
  return absl::OkStatus();
}

absl::Status DeviceGptModel::FinalNormBackward(const DeviceUnitWeights& wf,
                                               const float* dn, const float* x,
                                               float* dx, float* grad) {
  const int64_t M = rows(), C = shape_.width;
  const float* stats = static_cast<const float*>(head_[kHeadOwn].data());
  RETURN_IF_ERROR(k::LayerNormBackward(dn, x, wf.Vector(0), stats, stats + M,
                                       M, C, dx, grad + wf.offset[0],
                                       grad + wf.offset[1], stream_));
  Mark("layernorm bwd");
  return absl::OkStatus();
}

absl::Status DeviceGptModel::EmbeddingGrad(float* grad) {
  const UnitInfo& u = layout_->units()[embedding_unit()];
  const uint64_t wte = layout_->tensors()[u.tensors[0]].offset - u.offset;
  const uint64_t wpe = layout_->tensors()[u.tensors[1]].offset - u.offset;
  return k::EmbeddingBackward(dx_.f32(), tokens_device(), dims_.batch,
                              dims_.seq, dims_.width, shape_.vocab, grad + wte,
                              grad + wpe, stream_);
}

}  // namespace zeroshard::model
