#include "model/cuda/device_llama.h"

#include <utility>

#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/attention_shape.h"
#include "model/kernels/cpu/rope.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/flash_attention.h"
#include "model/kernels/cuda/llama_ops.h"
#include "model/kernels/online_softmax.h"
#include "model/llama.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;

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
  RETURN_IF_ERROR(m->InitDecoder(layout, shape, param_dtype, policy, device));
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
  RETURN_IF_ERROR(BeginBatch(batch, seq, tokens, targets));
  ASSIGN_OR_RETURN(rope_, RopeFor(seq));
  block_ = LlamaBlockDimsOf(dims_, batch, seq, ComputeDType(param_dtype_),
                            /*rope=*/nullptr);
  return absl::OkStatus();
}

absl::Status DeviceLlamaModel::EmbedTokens(const DeviceUnitWeights& w,
                                           float* x) {
  return k::TokenEmbeddingForward(tokens_device(), rows(), dims_.width,
                                  dims_.vocab, w.Vector(0), x, stream_);
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

absl::Status DeviceLlamaModel::FinalNormForward(const DeviceUnitWeights& wf,
                                                const float* x, float* normed) {
  const int64_t M = rows();
  RETURN_IF_ERROR(head_[kHeadOwn].Reserve(M * sizeof(float), stream_));
  RETURN_IF_ERROR(k::RmsNormForward(x, wf.Vector(0), M, dims_.width,
                                    block_.norm_eps, normed,
                                    static_cast<float*>(head_[kHeadOwn].data()),
                                    stream_));
  Mark("rmsnorm fwd");
  return absl::OkStatus();
}

absl::Status DeviceLlamaModel::FinalNormBackward(const DeviceUnitWeights& wf,
                                                 const float* dn, const float* x,
                                                 float* dx, float* grad) {
  RETURN_IF_ERROR(k::RmsNormBackward(
      dn, x, wf.Vector(0), static_cast<const float*>(head_[kHeadOwn].data()),
      rows(), dims_.width, dx, grad + wf.offset[0], stream_));
  Mark("rmsnorm bwd");
  return absl::OkStatus();
}

absl::Status DeviceLlamaModel::EmbeddingGrad(float* grad) {
  const UnitInfo& u = layout_->units()[embedding_unit()];
  const uint64_t table = layout_->tensors()[u.tensors[0]].offset - u.offset;
  return k::TokenEmbeddingBackward(dx_.f32(), tokens_device(), rows(),
                                   dims_.width, dims_.vocab, grad + table,
                                   stream_);
}

}  // namespace zeroshard::model
