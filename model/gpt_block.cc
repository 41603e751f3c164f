#include "model/gpt_block.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "model/kernels/cpu/cpu_kernels.h"

namespace zeroshard::model {
namespace {

// The kernel backend (see model/kernels/cpu/cpu_kernels.h).
namespace k = kernels::cpu;

// Tensor indices within a block unit (model/gpt_manifest.cc order).
enum : int {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB,
  kLn2W, kLn2B, kFcW, kFcB, kFc2W, kFc2B,
};

k::ConstTensor View(const ActBuffer& b) { return {b.data(), b.dtype()}; }

// Stores v (n floats) into dst and rounds v to what was stored.
void StoreRounded(float* v, ActBuffer& dst) {
  dst.FromFloat(v);
  if (dst.dtype() == DType::kBf16) dst.ToFloat(v);
}

// Grow-only FP32 scratch of the calling thread, one buffer per slot: no
// zero-fill and no fresh pages on every block call. Contents are undefined;
// a call uses each slot at most once and blocks never nest.
float* Scratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[6];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

}  // namespace

void BlockActs::Release() {
  for (ActBuffer* b : {&ln1, &qkv, &probs, &atty, &x2, &ln2, &h, &mean1,
                       &rstd1, &mean2, &rstd2}) {
    b->Release();
  }
}

absl::Status BlockForward(const BlockDims& d, const UnitWeights& w,
                          const ActBuffer& x_in, ActBuffer* x_out,
                          BlockActs* a, ActivationMemory* mem) {
  const int64_t M = d.rows(), C = d.width;
  const DType dt = d.dtype;
  if (x_in.size() != M * C || x_in.dtype() != dt) {
    return absl::InvalidArgumentError("block forward: input has the wrong size or dtype");
  }
  a->ln1 = ActBuffer(mem, dt, M * C);
  a->qkv = ActBuffer(mem, dt, M * 3 * C);
  a->probs = ActBuffer(mem, dt, d.batch * d.heads * d.seq * d.seq);
  a->atty = ActBuffer(mem, dt, M * C);
  a->x2 = ActBuffer(mem, dt, M * C);
  a->ln2 = ActBuffer(mem, dt, M * C);
  a->h = ActBuffer(mem, dt, M * 4 * C);
  for (ActBuffer* b : {&a->mean1, &a->rstd1, &a->mean2, &a->rstd2}) {
    *b = ActBuffer(mem, DType::kFp32, M);
  }
  float* x = Scratch(0, M * C);
  float* t = Scratch(1, M * C);
  float* wide = Scratch(2, M * 4 * C);
  x_in.ToFloat(x);
  // Attention half.
  RETURN_IF_ERROR(k::LayerNormForward(x, w.Vector(kLn1W), w.Vector(kLn1B),
                                      M, C, t, a->mean1.f32(), a->rstd1.f32()));
  a->ln1.FromFloat(t);
  RETURN_IF_ERROR(k::LinearForward(View(a->ln1), w.Matrix(kAttnW), w.Vector(kAttnB),
                                   M, C, 3 * C, wide));
  a->qkv.FromFloat(wide);
  k::AttentionShape as{d.batch, d.seq, C, d.heads, dt};
  RETURN_IF_ERROR(k::AttentionForward(as, a->qkv.data(), a->probs.data(), t));
  a->atty.FromFloat(t);
  RETURN_IF_ERROR(k::LinearForward(View(a->atty), w.Matrix(kProjW), w.Vector(kProjB),
                                   M, C, C, t));
  k::ResidualForward(x, t, x, M * C);  // x now holds x2
  StoreRounded(x, a->x2);
  // MLP half.
  RETURN_IF_ERROR(k::LayerNormForward(x, w.Vector(kLn2W), w.Vector(kLn2B),
                                      M, C, t, a->mean2.f32(), a->rstd2.f32()));
  a->ln2.FromFloat(t);
  RETURN_IF_ERROR(k::LinearForward(View(a->ln2), w.Matrix(kFcW), w.Vector(kFcB),
                                   M, C, 4 * C, wide));
  StoreRounded(wide, a->h);
  k::GeluForward(wide, wide, M * 4 * C);
  ActBuffer g(nullptr, dt, M * 4 * C);  // transient
  g.FromFloat(wide);
  RETURN_IF_ERROR(k::LinearForward(View(g), w.Matrix(kFc2W), w.Vector(kFc2B),
                                   M, 4 * C, C, t));
  k::ResidualForward(x, t, x, M * C);
  *x_out = ActBuffer(mem, dt, M * C);
  x_out->FromFloat(x);
  return absl::OkStatus();
}

absl::Status BlockBackward(const BlockDims& d, const UnitWeights& w,
                           const ActBuffer& x_in, const BlockActs& a,
                           const float* dx_out, float* dx_in, float* grad) {
  const int64_t M = d.rows(), C = d.width;
  const DType dt = d.dtype;
  if (!a.held() || x_in.size() != M * C) {
    return absl::FailedPreconditionError(
        "block backward: the block's input and internal activations must be held");
  }
  auto G = [&](int t) { return grad + w.offset(t); };
  float* dx2 = Scratch(0, M * C);
  float* t = Scratch(1, M * C);
  float* x = Scratch(2, M * C);
  float* h = Scratch(3, M * 4 * C);
  float* dwide = Scratch(4, M * 4 * C);
  std::copy(dx_out, dx_out + M * C, dx2);
  // MLP: recompute gelu(h) from the saved pre-activation.
  a.h.ToFloat(h);
  k::GeluForward(h, dwide, M * 4 * C);
  ActBuffer g(nullptr, dt, M * 4 * C);
  g.FromFloat(dwide);
  RETURN_IF_ERROR(k::LinearBackward(dx_out, View(g), w.Matrix(kFc2W), M, 4 * C, C,
                                    dwide, G(kFc2W), G(kFc2B)));
  k::GeluBackward(h, dwide, dwide, M * 4 * C);
  RETURN_IF_ERROR(k::LinearBackward(dwide, View(a.ln2), w.Matrix(kFcW), M, C,
                                    4 * C, t, G(kFcW), G(kFcB)));
  a.x2.ToFloat(x);
  RETURN_IF_ERROR(k::LayerNormBackward(t, x, w.Vector(kLn2W),
                                       a.mean2.f32(), a.rstd2.f32(), M, C,
                                       dx2, G(kLn2W), G(kLn2B)));
  // Attention.
  RETURN_IF_ERROR(k::LinearBackward(dx2, View(a.atty), w.Matrix(kProjW), M, C,
                                    C, t, G(kProjW), G(kProjB)));
  float* dqkv = Scratch(5, M * 3 * C);
  k::AttentionShape as{d.batch, d.seq, C, d.heads, dt};
  RETURN_IF_ERROR(k::AttentionBackward(as, a.qkv.data(), a.probs.data(), t,
                                       dqkv));
  RETURN_IF_ERROR(k::LinearBackward(dqkv, View(a.ln1), w.Matrix(kAttnW), M, C,
                                    3 * C, t, G(kAttnW), G(kAttnB)));
  std::copy(dx2, dx2 + M * C, dx_in);
  x_in.ToFloat(x);
  return k::LayerNormBackward(t, x, w.Vector(kLn1W), a.mean1.f32(),
                              a.rstd1.f32(), M, C, dx_in, G(kLn1W), G(kLn1B));
}

}  // namespace zeroshard::model
