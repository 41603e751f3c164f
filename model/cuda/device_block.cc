#include "model/cuda/device_block.h"

#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/attention_shape.h"
#include "model/kernels/cuda/attention_gemm.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/layernorm.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cuda;

// Tensor indices within a block unit (model/gpt_manifest.cc order).
enum : int {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB,
  kLn2W, kLn2B, kFcW, kFcB, kFc2W, kFc2B,
};

// Scratch slots.
enum : int { kX, kT, kWide, kH, kDWide, kDQkv, kGelu, kDx2, kY };

k::DeviceTensor View(const DeviceBuffer& b) { return {b.data(), b.dtype()}; }

// x (FP32, n) rounded into `out` (dtype dt, n elements of raw storage).
absl::Status StoreAs(DType dt, const float* x, void* out, int64_t n,
                     cudaStream_t s) {
  if (dt == DType::kBf16) {
    return k::FloatsToBf16(x, static_cast<uint16_t*>(out), n, s);
  }
  return CudaStatus(cudaMemcpyAsync(out, x, n * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s),
                    "copying an activation");
}

}  // namespace

void DeviceBlockActs::Release() {
  for (DeviceBuffer* b : {&ln1, &qkv, &probs, &lse, &atty, &x2, &ln2, &h, &mean1,
                          &rstd1, &mean2, &rstd2}) {
    b->Release();
  }
}

absl::StatusOr<float*> DeviceBlockRunner::Scratch(int slot, int64_t n) {
  RETURN_IF_ERROR(scratch_[slot].Reserve(static_cast<size_t>(n) * sizeof(float),
                                         stream_));
  return static_cast<float*>(scratch_[slot].data());
}

int64_t DeviceBlockRunner::scratch_bytes() const {
  int64_t total = static_cast<int64_t>(dy_bf16_.bytes());
  for (const auto& s : scratch_) total += static_cast<int64_t>(s.bytes());
  return total;
}

absl::Status DeviceBlockRunner::Forward(const BlockDims& d,
                                        const DeviceUnitWeights& w,
                                        const DeviceBuffer& x_in,
                                        DeviceBuffer* x_out,
                                        DeviceBlockActs* a,
                                        ActivationMemory* mem) {
  const int64_t M = d.rows(), C = d.width;
  const DType dt = d.dtype;
  if (x_in.size() != M * C || x_in.dtype() != dt) {
    return absl::InvalidArgumentError(
        "device block forward: input has the wrong size or dtype");
  }
  cudaStream_t s = stream_;
  ASSIGN_OR_RETURN(a->ln1, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->qkv, DeviceBuffer::Allocate(mem, dt, M * 3 * C, s));
  const bool online = attention_kind_ == DeviceAttention::kOnline;
  const bool flash = attention_kind_ == DeviceAttention::kFlash;
  if (online || flash) {
    ASSIGN_OR_RETURN(a->lse, DeviceBuffer::Allocate(
                                 mem, DType::kFp32, d.batch * d.heads * d.seq, s));
  } else {
    ASSIGN_OR_RETURN(a->probs,
                     DeviceBuffer::Allocate(
                         mem, dt, d.batch * d.heads * d.seq * d.seq, s));
  }
  ASSIGN_OR_RETURN(a->atty, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->x2, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->ln2, DeviceBuffer::Allocate(mem, dt, M * C, s));
  ASSIGN_OR_RETURN(a->h, DeviceBuffer::Allocate(mem, dt, M * 4 * C, s));
  for (DeviceBuffer* b : {&a->mean1, &a->rstd1, &a->mean2, &a->rstd2}) {
    ASSIGN_OR_RETURN(*b, DeviceBuffer::Allocate(mem, DType::kFp32, M, s));
  }
  ASSIGN_OR_RETURN(float* x, Scratch(kX, M * C));
  ASSIGN_OR_RETURN(float* t, Scratch(kT, M * C));
  ASSIGN_OR_RETURN(float* wide, Scratch(kWide, M * 4 * C));
  ASSIGN_OR_RETURN(float* g, Scratch(kGelu, M * 4 * C));  // dt storage
  RETURN_IF_ERROR(x_in.ToFloat(x));
  Mark("casts");
  // Attention half.
  RETURN_IF_ERROR(k::LayerNormForward(x, w.Vector(kLn1W), w.Vector(kLn1B), M,
                                      C, t, a->mean1.f32(), a->rstd1.f32(), s));
  Mark("layernorm fwd");
  RETURN_IF_ERROR(a->ln1.FromFloat(t));
  Mark("casts");
  RETURN_IF_ERROR(linear_.Forward(View(a->ln1), w.Matrix(kAttnW),
                                  w.Vector(kAttnB), M, C, 3 * C, wide, s));
  RETURN_IF_ERROR(a->qkv.FromFloat(wide));
  Mark("casts");
  const kernels::AttentionShape as{d.batch, d.seq, C, d.heads, dt};
  if (online) {
    RETURN_IF_ERROR(k::OnlineAttentionForward(as, a->qkv.data(), a->lse.f32(),
                                              t, s));
  } else if (flash) {
    RETURN_IF_ERROR(flash_.Forward(as, a->qkv.data(), a->lse.f32(), t, s));
  } else {
    RETURN_IF_ERROR(
        attention_.Forward(as, a->qkv.data(), a->probs.data(), t, s));
  }
  Mark("attention fwd");
  RETURN_IF_ERROR(a->atty.FromFloat(t));
  Mark("casts");
  RETURN_IF_ERROR(linear_.Forward(View(a->atty), w.Matrix(kProjW),
                                  w.Vector(kProjB), M, C, C, t, s));
  RETURN_IF_ERROR(k::ResidualForward(x, t, x, M * C, s));  // x2
  Mark("residual");
  RETURN_IF_ERROR(a->x2.StoreRounded(x));
  Mark("casts");
  // MLP half.
  RETURN_IF_ERROR(k::LayerNormForward(x, w.Vector(kLn2W), w.Vector(kLn2B), M,
                                      C, t, a->mean2.f32(), a->rstd2.f32(), s));
  Mark("layernorm fwd");
  RETURN_IF_ERROR(a->ln2.FromFloat(t));
  Mark("casts");
  RETURN_IF_ERROR(linear_.Forward(View(a->ln2), w.Matrix(kFcW), w.Vector(kFcB),
                                  M, C, 4 * C, wide, s));
  RETURN_IF_ERROR(a->h.StoreRounded(wide));
  Mark("casts");
  RETURN_IF_ERROR(k::GeluForward(wide, wide, M * 4 * C, s));
  Mark("gelu");
  RETURN_IF_ERROR(StoreAs(dt, wide, g, M * 4 * C, s));
  Mark("casts");
  RETURN_IF_ERROR(linear_.Forward({g, dt}, w.Matrix(kFc2W), w.Vector(kFc2B), M,
                                  4 * C, C, t, s));
  RETURN_IF_ERROR(k::ResidualForward(x, t, x, M * C, s));
  Mark("residual");
  ASSIGN_OR_RETURN(*x_out, DeviceBuffer::Allocate(mem, dt, M * C, s));
  RETURN_IF_ERROR(x_out->FromFloat(x));
  Mark("casts");
  return absl::OkStatus();
}

absl::Status DeviceBlockRunner::Backward(const BlockDims& d,
                                         const DeviceUnitWeights& w,
                                         const DeviceBuffer& x_in,
                                         const DeviceBlockActs& a,
                                         const float* dx_out, float* dx_in,
                                         float* grad) {
  const int64_t M = d.rows(), C = d.width;
  const DType dt = d.dtype;
  if (!a.held() || x_in.size() != M * C) {
    return absl::FailedPreconditionError(
        "device block backward: the block's input and internal activations "
        "must be held");
  }
  cudaStream_t s = stream_;
  auto G = [&](int t) { return grad + w.offset[t]; };
  ASSIGN_OR_RETURN(float* dx2, Scratch(kDx2, M * C));
  ASSIGN_OR_RETURN(float* t, Scratch(kT, M * C));
  ASSIGN_OR_RETURN(float* x, Scratch(kX, M * C));
  ASSIGN_OR_RETURN(float* h, Scratch(kH, M * 4 * C));
  ASSIGN_OR_RETURN(float* dwide, Scratch(kDWide, M * 4 * C));
  ASSIGN_OR_RETURN(float* g, Scratch(kGelu, M * 4 * C));  // dt storage
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dx2, dx_out, M * C * sizeof(float),
                                             cudaMemcpyDeviceToDevice, s),
                             "device block backward: copying dx"));
  Mark("copies");
  // MLP: recompute gelu(h) from the saved pre-activation.
  RETURN_IF_ERROR(a.h.ToFloat(h));
  Mark("casts");
  RETURN_IF_ERROR(k::GeluForward(h, dwide, M * 4 * C, s));
  Mark("gelu");
  RETURN_IF_ERROR(StoreAs(dt, dwide, g, M * 4 * C, s));
  Mark("casts");
  RETURN_IF_ERROR(linear_.Backward(dx_out, {g, dt}, w.Matrix(kFc2W), M, 4 * C,
                                   C, dwide, G(kFc2W), G(kFc2B), s));
  RETURN_IF_ERROR(k::GeluBackward(h, dwide, dwide, M * 4 * C, s));
  Mark("gelu");
  RETURN_IF_ERROR(linear_.Backward(dwide, View(a.ln2), w.Matrix(kFcW), M, C,
                                   4 * C, t, G(kFcW), G(kFcB), s));
  RETURN_IF_ERROR(a.x2.ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::LayerNormBackward(t, x, w.Vector(kLn2W), a.mean2.f32(),
                                       a.rstd2.f32(), M, C, dx2, G(kLn2W),
                                       G(kLn2B), s));
  Mark("layernorm bwd");
  // Attention.
  RETURN_IF_ERROR(linear_.Backward(dx2, View(a.atty), w.Matrix(kProjW), M, C,
                                   C, t, G(kProjW), G(kProjB), s));
  ASSIGN_OR_RETURN(float* dqkv, Scratch(kDQkv, M * 3 * C));
  const kernels::AttentionShape as{d.batch, d.seq, C, d.heads, dt};
  if (attention_kind_ != DeviceAttention::kProbs) {
    // D = dy . y from the saved (rounded) attention output, as
    // FlashAttention does with a BF16 output.
    ASSIGN_OR_RETURN(float* y, Scratch(kY, M * C));
    RETURN_IF_ERROR(a.atty.ToFloat(y));
    Mark("casts");
    if (attention_kind_ == DeviceAttention::kFlash) {
      RETURN_IF_ERROR(
          flash_.Backward(as, a.qkv.data(), a.lse.f32(), y, t, dqkv, s));
    } else {
      RETURN_IF_ERROR(k::OnlineAttentionBackward(as, a.qkv.data(),
                                                 a.lse.f32(), y, t, dqkv, s));
    }
  } else {
    RETURN_IF_ERROR(
        attention_.Backward(as, a.qkv.data(), a.probs.data(), t, dqkv, s));
  }
  Mark("attention bwd");
  RETURN_IF_ERROR(linear_.Backward(dqkv, View(a.ln1), w.Matrix(kAttnW), M, C,
                                   3 * C, t, G(kAttnW), G(kAttnB), s));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dx_in, dx2, M * C * sizeof(float),
                                             cudaMemcpyDeviceToDevice, s),
                             "device block backward: copying dx"));
  Mark("copies");
  RETURN_IF_ERROR(x_in.ToFloat(x));
  Mark("casts");
  RETURN_IF_ERROR(k::LayerNormBackward(t, x, w.Vector(kLn1W), a.mean1.f32(),
                                       a.rstd1.f32(), M, C, dx_in, G(kLn1W),
                                       G(kLn1B), s));
  Mark("layernorm bwd");
  return absl::OkStatus();
}

}  // namespace zeroshard::model
