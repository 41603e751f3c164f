#include "model/cuda/device_llama_block.h"

#include <algorithm>

#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/attention_shape.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/llama_ops.h"
#include "model/kernels/cuda/online_attention.h"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;

// Tensor indices within a block unit (model/llama_manifest.cc order).
enum : int { kLbNorm1, kLbQ, kLbK, kLbV, kLbO, kLbNorm2, kLbGate, kLbUp, kLbDown };

// Scratch slots.
enum : int { kLbX, kLbT, kLbQkvc, kLbQkv, kLbGu, kLbAct, kLbDQkv, kLbDQkvc, kLbDx2 };

k::DeviceTensor ViewOf(const DeviceBuffer& b) { return {b.data(), b.dtype()}; }

// Whether b's data directly follows a's `a_elems` elements: q, k, v (and
// gate, up) are adjacent in a unit's buffer, so they are one weight.
bool Follows(const k::DeviceTensor& a, int64_t a_elems, const k::DeviceTensor& b) {
  return a.dtype == b.dtype &&
         static_cast<const char*>(a.data) + a_elems * DTypeSize(a.dtype) ==
             static_cast<const char*>(b.data);
}

absl::Status CopyFloats(float* dst, const float* src, int64_t n, cudaStream_t s) {
  return CudaStatus(cudaMemcpyAsync(dst, src, n * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s),
                    "device llama block: copying dx");
}

}  // namespace

void DeviceLlamaActs::Release() {
  for (DeviceBuffer* b : {&h1, &qkv, &probs, &atty, &x2, &h2, &gu, &act, &rstd1,
                          &rstd2, &lse}) {
    b->Release();
  }
}

absl::StatusOr<float*> DeviceLlamaBlockRunner::Scratch(int slot, int64_t n) {
  RETURN_IF_ERROR(scratch_[slot].Reserve(static_cast<size_t>(n) * sizeof(float),
                                         stream_));
  return static_cast<float*>(scratch_[slot].data());
}

int64_t DeviceLlamaBlockRunner::scratch_bytes() const {
  int64_t total = static_cast<int64_t>(dy_bf16_.bytes());
  for (const auto& s : scratch_) total += static_cast<int64_t>(s.bytes());
  return total;
}

absl::Status DeviceLlamaBlockRunner::Project(k::DeviceTensor x, int64_t in,
                                             k::DeviceTensor w, int64_t out,
                                             int64_t m, float* y, int64_t ldy,
                                             bool accumulate) {
  return gemm_->Run({.m = m, .n = out, .k = in,
                     .a = {x.data, x.dtype, in, false},
                     .b = {w.data, w.dtype, in, true},
                     .c = y, .ldc = ldy, .accumulate = accumulate},
                    stream_);
}

absl::Status DeviceLlamaBlockRunner::ProjectBackward(
    const float* dy, int64_t ldy, int64_t col, k::DeviceTensor x, int64_t in,
    k::DeviceTensor w, int64_t out, int64_t m, float* dx, bool accumulate_dx,
    float* dw) {
  kernels::MatRef g{dy + col, DType::kFp32, ldy, false};
  if (x.dtype == DType::kBf16 && w.dtype == DType::kBf16) {
    // The whole [m, ldy] matrix rounded (each element alone, so the columns
    // used are what a rounding of them alone gives).
    RETURN_IF_ERROR(dy_bf16_.Reserve(m * ldy * sizeof(uint16_t), stream_));
    auto* q = static_cast<uint16_t*>(dy_bf16_.data());
    RETURN_IF_ERROR(k::FloatsToBf16(dy, q, m * ldy, stream_));
    Mark("casts");
    g = {q + col, DType::kBf16, ldy, false};
  }
  RETURN_IF_ERROR(gemm_->Run({.m = m, .n = in, .k = out,
                              .a = g,
                              .b = {w.data, w.dtype, in, false},
                              .c = dx, .ldc = in, .accumulate = accumulate_dx},
                             stream_));
  g.trans = true;
  return gemm_->Run({.m = out, .n = in, .k = m,
                     .a = g,
                     .b = {x.data, x.dtype, in, false},
                     .c = dw, .ldc = in, .accumulate = true},
                    stream_);
}

absl::Status DeviceLlamaBlockRunner::Forward(const LlamaBlockDims& d,
                                             const DeviceRope& rope,
                                             const DeviceUnitWeights& w,
                                             const DeviceBuffer& x_in,
                                             DeviceBuffer* x_out,
                                             DeviceLlamaActs* a,
                                             ActivationMemory* mem) {
  const int64_t M = d.rows(), C = d.width, F = d.mlp_width;
  const int64_t H = d.heads, K = d.kv_heads, hd = d.head_dim, A = H * hd;
  const DType dt = d.dtype;
  const kernels::cpu::GroupedQkv g{.heads = H, .kv_heads = K, .head_dim = hd};
  RETURN_IF_ERROR(kernels::cpu::ValidateGroupedQkv(g));
  if (x_in.size() != M * C || x_in.dtype() != dt || rope.cos == nullptr ||
      rope.head_dim != hd || rope.seq != d.seq) {
    return absl::InvalidArgumentError(
        "device llama block forward: input of the wrong size or dtype, or no "
        "rotary table for its sequence");
  }
  cudaStream_t s = stream_;
  const int64_t cw = g.compact_width(), ew = g.expanded_width();
  const bool online = attention_kind_ == DeviceAttention::kOnline;
  const bool flash = attention_kind_ == DeviceAttention::kFlash;
  ASSIGN_OR_RETURN(a->h1, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->qkv, DeviceBuffer::Allocate(mem, dt, M * ew, s));
  if (online || flash) {
    ASSIGN_OR_RETURN(a->lse, DeviceBuffer::Allocate(mem, DType::kFp32,
                                                    d.batch * H * d.seq, s));
  } else {
    ASSIGN_OR_RETURN(a->probs, DeviceBuffer::Allocate(
                                   mem, dt, d.batch * H * d.seq * d.seq, s));
  }
  ASSIGN_OR_RETURN(a->atty, DeviceBuffer::Allocate(mem, dt, M * A, s));
  ASSIGN_OR_RETURN(a->x2, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->h2, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->gu, DeviceBuffer::Allocate(mem, dt, M * 2 * F, s));
  ASSIGN_OR_RETURN(a->act, DeviceBuffer::Allocate(mem, dt, M * F, s));
  ASSIGN_OR_RETURN(a->rstd1, DeviceBuffer::Allocate(mem, DType::kFp32, M, s));
  ASSIGN_OR_RETURN(a->rstd2, DeviceBuffer::Allocate(mem, DType::kFp32, M, s));
  ASSIGN_OR_RETURN(float* x, Scratch(kLbX, M * C));
  ASSIGN_OR_RETURN(float* t, Scratch(kLbT, M * std::max(C, A)));
  ASSIGN_OR_RETURN(float* qkvc, Scratch(kLbQkvc, M * cw));
  ASSIGN_OR_RETURN(float* qkv, Scratch(kLbQkv, M * ew));
  ASSIGN_OR_RETURN(float* gu, Scratch(kLbGu, M * 2 * F));
  ASSIGN_OR_RETURN(float* act, Scratch(kLbAct, M * F));
  RETURN_IF_ERROR(x_in.ToFloat(x));
  Mark("casts");
  // Attention half.
  RETURN_IF_ERROR(k::RmsNormForward(x, w.Vector(kLbNorm1), M, C, d.norm_eps, t,
                                    a->rstd1.f32(), s));
  Mark("rmsnorm fwd");
  RETURN_IF_ERROR(a->h1.FromFloat(t));
  Mark("casts");
  const k::DeviceTensor wq = w.Matrix(kLbQ), wk = w.Matrix(kLbK), wv = w.Matrix(kLbV);
  if (Follows(wq, H * hd * C, wk) && Follows(wk, K * hd * C, wv)) {
    RETURN_IF_ERROR(Project(ViewOf(a->h1), C, wq, cw, M, qkvc, cw));
  } else {
    RETURN_IF_ERROR(Project(ViewOf(a->h1), C, wq, H * hd, M, qkvc, cw));
    RETURN_IF_ERROR(Project(ViewOf(a->h1), C, wk, K * hd, M, qkvc + H * hd, cw));
    RETURN_IF_ERROR(
        Project(ViewOf(a->h1), C, wv, K * hd, M, qkvc + (H + K) * hd, cw));
  }
  Mark("qkv matmul fwd");
  RETURN_IF_ERROR(k::RopeApply(rope.cos, rope.sin, rope.seq, hd, qkvc, M, H + K,
                               cw, /*inverse=*/false, s));
  RETURN_IF_ERROR(k::ExpandGroupedQkv(g, qkvc, M, qkv, s));
  Mark("rotary and groups");
  RETURN_IF_ERROR(a->qkv.FromFloat(qkv));
  Mark("casts");
  const kernels::AttentionShape as{d.batch, d.seq, A, H, dt};
  if (online) {
    RETURN_IF_ERROR(k::OnlineAttentionForward(as, a->qkv.data(), a->lse.f32(), t, s));
  } else if (flash) {
    RETURN_IF_ERROR(flash_.Forward(as, a->qkv.data(), a->lse.f32(), t, s));
  } else {
    RETURN_IF_ERROR(attention_.Forward(as, a->qkv.data(), a->probs.data(), t, s));
  }
  Mark("attention fwd");
  RETURN_IF_ERROR(a->atty.FromFloat(t));
  Mark("casts");
  RETURN_IF_ERROR(Project(ViewOf(a->atty), A, w.Matrix(kLbO), C, M, t, C));
  Mark("o matmul fwd");
  RETURN_IF_ERROR(k::ResidualForward(x, t, x, M * C, s));  // x now holds x2
  Mark("residual");
  RETURN_IF_ERROR(a->x2.StoreRounded(x));
  Mark("casts");
  // MLP half.
  RETURN_IF_ERROR(k::RmsNormForward(x, w.Vector(kLbNorm2), M, C, d.norm_eps, t,
                                    a->rstd2.f32(), s));
  Mark("rmsnorm fwd");
  RETURN_IF_ERROR(a->h2.FromFloat(t));
  Mark("casts");
  const k::DeviceTensor wg = w.Matrix(kLbGate), wu = w.Matrix(kLbUp);
  if (Follows(wg, F * C, wu)) {
    RETURN_IF_ERROR(Project(ViewOf(a->h2), C, wg, 2 * F, M, gu, 2 * F));
  } else {
    RETURN_IF_ERROR(Project(ViewOf(a->h2), C, wg, F, M, gu, 2 * F));
    RETURN_IF_ERROR(Project(ViewOf(a->h2), C, wu, F, M, gu + F, 2 * F));
  }
  Mark("gate/up matmul fwd");
  RETURN_IF_ERROR(a->gu.StoreRounded(gu));
  Mark("casts");
  RETURN_IF_ERROR(k::SwiGluForward(gu, M, F, act, s));
  Mark("swiglu");
  RETURN_IF_ERROR(a->act.FromFloat(act));
  Mark("casts");
  RETURN_IF_ERROR(Project(ViewOf(a->act), F, w.Matrix(kLbDown), C, M, t, C));
  Mark("down matmul fwd");
  RETURN_IF_ERROR(k::ResidualForward(x, t, x, M * C, s));
  Mark("residual");
  ASSIGN_OR_RETURN(*x_out, DeviceBuffer::Allocate(mem, dt, M * C, s));
  RETURN_IF_ERROR(x_out->FromFloat(x));
  Mark("casts");
  return absl::OkStatus();
}

absl::Status DeviceLlamaBlockRunner::Backward(
    const LlamaBlockDims& d, const DeviceRope& rope, const DeviceUnitWeights& w,
    const DeviceBuffer& x_in, const DeviceLlamaActs& a, const float* dx_out,
    float* dx_in, float* grad) {
  const int64_t M = d.rows(), C = d.width, F = d.mlp_width;
  const int64_t H = d.heads, K = d.kv_heads, hd = d.head_dim, A = H * hd;
  const DType dt = d.dtype;
  const kernels::cpu::GroupedQkv g{.heads = H, .kv_heads = K, .head_dim = hd};
  if (!a.held() || x_in.size() != M * C || rope.cos == nullptr ||
      rope.seq != d.seq) {
    return absl::FailedPreconditionError(
        "device llama block backward: the block's input and internal "
        "activations must be held");
  }
  cudaStream_t s = stream_;
  const int64_t cw = g.compact_width(), ew = g.expanded_width();
  auto G = [&](int t) { return grad + w.offset[t]; };
  ASSIGN_OR_RETURN(float* dx2, Scratch(kLbDx2, M * C));
  ASSIGN_OR_RETURN(float* gu, Scratch(kLbGu, M * 2 * F));
  ASSIGN_OR_RETURN(float* dact, Scratch(kLbAct, M * F));
  ASSIGN_OR_RETURN(float* dgu, Scratch(kLbQkvc, std::max(M * 2 * F, M * cw)));
  ASSIGN_OR_RETURN(float* t, Scratch(kLbT, M * std::max(C, A)));
  ASSIGN_OR_RETURN(float* x, Scratch(kLbX, M * C));
  ASSIGN_OR_RETURN(float* dqkv, Scratch(kLbDQkv, M * ew));
  ASSIGN_OR_RETURN(float* dqkvc, Scratch(kLbDQkvc, M * cw));
  RETURN_IF_ERROR(CopyFloats(dx2, dx_out, M * C, s));
  Mark("copies");
  // MLP.
  RETURN_IF_ERROR(a.gu.ToFloat(gu));
  Mark("casts");
  RETURN_IF_ERROR(ProjectBackward(dx_out, C, 0, ViewOf(a.act), F,
                                  w.Matrix(kLbDown), C, M, dact, false, G(kLbDown)));
  Mark("down matmul bwd");
  RETURN_IF_ERROR(k::SwiGluBackward(gu, dact, M, F, dgu, s));
  Mark("swiglu");
  const k::DeviceTensor wg = w.Matrix(kLbGate), wu = w.Matrix(kLbUp);
  if (Follows(wg, F * C, wu) && G(kLbUp) == G(kLbGate) + F * C) {
    RETURN_IF_ERROR(ProjectBackward(dgu, 2 * F, 0, ViewOf(a.h2), C, wg, 2 * F, M,
                                    t, false, G(kLbGate)));
  } else {
    RETURN_IF_ERROR(ProjectBackward(dgu, 2 * F, 0, ViewOf(a.h2), C, wg, F, M, t,
                                    false, G(kLbGate)));
    RETURN_IF_ERROR(ProjectBackward(dgu, 2 * F, F, ViewOf(a.h2), C, wu, F, M, t,
                                    true, G(kLbUp)));
  }
  Mark("gate/up matmul bwd");
  RETURN_IF_ERROR(a.x2.ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::RmsNormBackward(t, x, w.Vector(kLbNorm2), a.rstd2.f32(), M, C,
                                     dx2, G(kLbNorm2), s));
  Mark("rmsnorm bwd");
  // Attention.
  RETURN_IF_ERROR(ProjectBackward(dx2, C, 0, ViewOf(a.atty), A, w.Matrix(kLbO), C,
                                  M, t, false, G(kLbO)));
  Mark("o matmul bwd");
  const kernels::AttentionShape as{d.batch, d.seq, A, H, dt};
  if (attention_kind_ != DeviceAttention::kProbs) {
    // D = dy . y from the saved (rounded) attention output, as device_block
    // does.
    ASSIGN_OR_RETURN(float* y, Scratch(kLbQkv, std::max(M * A, M * ew)));
    RETURN_IF_ERROR(a.atty.ToFloat(y));
    Mark("casts");
    if (attention_kind_ == DeviceAttention::kFlash) {
      RETURN_IF_ERROR(flash_.Backward(as, a.qkv.data(), a.lse.f32(), y, t, dqkv, s));
    } else {
      RETURN_IF_ERROR(
          k::OnlineAttentionBackward(as, a.qkv.data(), a.lse.f32(), y, t, dqkv, s));
    }
  } else {
    RETURN_IF_ERROR(attention_.Backward(as, a.qkv.data(), a.probs.data(), t, dqkv, s));
  }
  Mark("attention bwd");
  RETURN_IF_ERROR(k::ReduceGroupedQkvGrad(g, dqkv, M, dqkvc, s));
  RETURN_IF_ERROR(k::RopeApply(rope.cos, rope.sin, rope.seq, hd, dqkvc, M, H + K,
                               cw, /*inverse=*/true, s));
  Mark("rotary and groups");
  const k::DeviceTensor wq = w.Matrix(kLbQ), wk = w.Matrix(kLbK), wv = w.Matrix(kLbV);
  if (Follows(wq, H * hd * C, wk) && Follows(wk, K * hd * C, wv) &&
      G(kLbK) == G(kLbQ) + H * hd * C && G(kLbV) == G(kLbK) + K * hd * C) {
    RETURN_IF_ERROR(ProjectBackward(dqkvc, cw, 0, ViewOf(a.h1), C, wq, cw, M, t,
                                    false, G(kLbQ)));
  } else {
    RETURN_IF_ERROR(ProjectBackward(dqkvc, cw, 0, ViewOf(a.h1), C, wq, H * hd, M,
                                    t, false, G(kLbQ)));
    RETURN_IF_ERROR(ProjectBackward(dqkvc, cw, H * hd, ViewOf(a.h1), C, wk,
                                    K * hd, M, t, true, G(kLbK)));
    RETURN_IF_ERROR(ProjectBackward(dqkvc, cw, (H + K) * hd, ViewOf(a.h1), C, wv,
                                    K * hd, M, t, true, G(kLbV)));
  }
  Mark("qkv matmul bwd");
  RETURN_IF_ERROR(CopyFloats(dx_in, dx2, M * C, s));
  Mark("copies");
  RETURN_IF_ERROR(x_in.ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::RmsNormBackward(t, x, w.Vector(kLbNorm1), a.rstd1.f32(), M, C,
                                     dx_in, G(kLbNorm1), s));
  Mark("rmsnorm bwd");
  return absl::OkStatus();
}

}  // namespace zeroshard::model
