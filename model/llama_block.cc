#include "model/llama_block.h"

#include <algorithm>
#include <vector>

#include "common/status_macros.h"
#include "model/kernels/cpu/bf16_convert.h"
#include "model/kernels/cpu/cpu_kernels.h"

namespace zeroshard::model {
namespace {

namespace k = kernels::cpu;

// Tensor indices within a block unit (model/llama_manifest.cc order).
enum : int { kLlNorm1, kLlQ, kLlK, kLlV, kLlO, kLlNorm2, kLlGate, kLlUp, kLlDown };

k::ConstTensor LlamaView(const ActBuffer& b) { return {b.data(), b.dtype()}; }

// Stores v (n floats) into dst and rounds v to what was stored.
void LlamaStoreRounded(float* v, ActBuffer& dst) {
  dst.FromFloat(v);
  if (dst.dtype() == DType::kBf16) dst.ToFloat(v);
}

// Grow-only FP32 scratch of the calling thread, one buffer per slot.
float* LlamaScratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[9];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// y[M, out] (row stride ldy) = x[M, in] W^T, W an nn.Linear weight
// [out, in]; accumulated into y when `accumulate`.
absl::Status Project(k::ConstTensor x, int64_t in, k::ConstTensor w, int64_t out,
                     int64_t m, float* y, int64_t ldy, bool accumulate = false) {
  return k::Gemm({.m = m, .n = out, .k = in,
                  .a = {x.data, x.dtype, in, false},
                  .b = {w.data, w.dtype, in, true},
                  .c = y, .ldc = ldy, .accumulate = accumulate});
}

// Its backward: dx[M, in] (+)= dy W (dy [M, out], row stride ldy), and
// dW[out, in] += dy^T x. With BF16 operands dy is rounded to BF16 once here
// for both products, as Gemm would round it for each (the same bits).
absl::Status ProjectBackward(const float* dy, int64_t ldy, k::ConstTensor x, int64_t in,
                             k::ConstTensor w, int64_t out, int64_t m, float* dx,
                             bool accumulate_dx, float* dw) {
  k::MatRef g{dy, DType::kFp32, ldy, false};
  if (x.dtype == DType::kBf16 && w.dtype == DType::kBf16) {
    thread_local std::vector<uint16_t> rounded;
    if (static_cast<int64_t>(rounded.size()) < m * out) rounded.resize(m * out);
    for (int64_t r = 0; r < m; ++r) {
      k::FloatsToBf16(dy + r * ldy, rounded.data() + r * out, out);
    }
    g = {rounded.data(), DType::kBf16, out, false};
  }
  RETURN_IF_ERROR(k::Gemm({.m = m, .n = in, .k = out,
                           .a = g,
                           .b = {w.data, w.dtype, in, false},
                           .c = dx, .ldc = in, .accumulate = accumulate_dx}));
  g.trans = true;
  return k::Gemm({.m = out, .n = in, .k = m,
                  .a = g,
                  .b = {x.data, x.dtype, in, false},
                  .c = dw, .ldc = in, .accumulate = true});
}

// Whether b's data directly follows a's `a_elems` elements (q, k, v and
// gate, up are adjacent in a unit's buffer when the kernels read it in
// place), so that they are one [rows, in] weight.
bool Adjacent(const k::ConstTensor& a, int64_t a_elems, const k::ConstTensor& b) {
  return a.dtype == b.dtype &&
         static_cast<const char*>(a.data) + a_elems * DTypeSize(a.dtype) ==
             static_cast<const char*>(b.data);
}

k::GroupedQkv LlamaGroups(const LlamaBlockDims& d) {
  return {.heads = d.heads, .kv_heads = d.kv_heads, .head_dim = d.head_dim};
}

}  // namespace

LlamaBlockDims LlamaBlockDimsOf(const LlamaDims& dims, int64_t batch, int64_t seq,
                                DType dtype, const kernels::cpu::RopeTable* rope) {
  return LlamaBlockDims{.batch = batch,
                        .seq = seq,
                        .width = dims.width,
                        .heads = dims.heads,
                        .kv_heads = dims.kv_heads,
                        .head_dim = dims.head_dim,
                        .mlp_width = dims.mlp_width,
                        .norm_eps = static_cast<float>(dims.norm_eps),
                        .dtype = dtype,
                        .rope = rope};
}

void LlamaBlockActs::Release() {
  for (ActBuffer* b : {&h1, &qkv, &probs, &atty, &x2, &h2, &gu, &act, &rstd1, &rstd2}) {
    b->Release();
  }
}

absl::Status LlamaBlockForward(const LlamaBlockDims& d, const UnitWeights& w,
                               const ActBuffer& x_in, ActBuffer* x_out,
                               LlamaBlockActs* a, ActivationMemory* mem) {
  const int64_t M = d.rows(), C = d.width, F = d.mlp_width;
  const int64_t H = d.heads, K = d.kv_heads, hd = d.head_dim, A = H * hd;
  const DType dt = d.dtype;
  const k::GroupedQkv g = LlamaGroups(d);
  RETURN_IF_ERROR(k::ValidateGroupedQkv(g));
  if (x_in.size() != M * C || x_in.dtype() != dt || d.rope == nullptr ||
      d.rope->head_dim != hd || d.rope->seq != d.seq) {
    return absl::InvalidArgumentError(
        "llama block forward: input of the wrong size or dtype, or no rotary table "
        "for its sequence");
  }
  const int64_t cw = g.compact_width(), ew = g.expanded_width();
  a->h1 = ActBuffer(mem, dt, M * C);
  a->qkv = ActBuffer(mem, dt, M * ew);
  a->probs = ActBuffer(mem, dt, d.batch * H * d.seq * d.seq);
  a->atty = ActBuffer(mem, dt, M * A);
  a->x2 = ActBuffer(mem, dt, M * C);
  a->h2 = ActBuffer(mem, dt, M * C);
  a->gu = ActBuffer(mem, dt, M * 2 * F);
  a->act = ActBuffer(mem, dt, M * F);
  a->rstd1 = ActBuffer(mem, DType::kFp32, M);
  a->rstd2 = ActBuffer(mem, DType::kFp32, M);
  float* x = LlamaScratch(0, M * C);
  float* t = LlamaScratch(1, M * std::max(C, A));
  float* qkvc = LlamaScratch(2, M * cw);
  float* qkv = LlamaScratch(3, M * ew);
  float* gu = LlamaScratch(4, M * 2 * F);
  float* act = LlamaScratch(5, M * F);
  x_in.ToFloat(x);
  // Attention half.
  RETURN_IF_ERROR(k::RmsNormForward(x, w.Vector(kLlNorm1), M, C, d.norm_eps, t,
                                    a->rstd1.f32()));
  a->h1.FromFloat(t);
  const k::ConstTensor wq = w.Matrix(kLlQ), wk = w.Matrix(kLlK), wv = w.Matrix(kLlV);
  if (Adjacent(wq, H * hd * C, wk) && Adjacent(wk, K * hd * C, wv)) {
    // One product with the stacked [(H + 2K) hd, C] weight.
    RETURN_IF_ERROR(Project(LlamaView(a->h1), C, wq, cw, M, qkvc, cw));
  } else {
    RETURN_IF_ERROR(Project(LlamaView(a->h1), C, wq, H * hd, M, qkvc, cw));
    RETURN_IF_ERROR(Project(LlamaView(a->h1), C, wk, K * hd, M, qkvc + H * hd, cw));
    RETURN_IF_ERROR(Project(LlamaView(a->h1), C, wv, K * hd, M, qkvc + (H + K) * hd, cw));
  }
  RETURN_IF_ERROR(k::RopeForward(*d.rope, qkvc, M, H + K, cw));
  RETURN_IF_ERROR(k::ExpandGroupedQkv(g, qkvc, M, qkv));
  a->qkv.FromFloat(qkv);
  const k::AttentionShape as{d.batch, d.seq, A, H, dt};
  RETURN_IF_ERROR(k::AttentionForward(as, a->qkv.data(), a->probs.data(), t));
  a->atty.FromFloat(t);
  RETURN_IF_ERROR(Project(LlamaView(a->atty), A, w.Matrix(kLlO), C, M, t, C));
  k::ResidualForward(x, t, x, M * C);  // x now holds x2
  LlamaStoreRounded(x, a->x2);
  // MLP half.
  RETURN_IF_ERROR(k::RmsNormForward(x, w.Vector(kLlNorm2), M, C, d.norm_eps, t,
                                    a->rstd2.f32()));
  a->h2.FromFloat(t);
  const k::ConstTensor wg = w.Matrix(kLlGate), wu = w.Matrix(kLlUp);
  if (Adjacent(wg, F * C, wu)) {
    RETURN_IF_ERROR(Project(LlamaView(a->h2), C, wg, 2 * F, M, gu, 2 * F));
  } else {
    RETURN_IF_ERROR(Project(LlamaView(a->h2), C, wg, F, M, gu, 2 * F));
    RETURN_IF_ERROR(Project(LlamaView(a->h2), C, wu, F, M, gu + F, 2 * F));
  }
  LlamaStoreRounded(gu, a->gu);
  RETURN_IF_ERROR(k::SwiGluForward(gu, M, F, act));
  a->act.FromFloat(act);  // kept: the down projection's weight gradient reads it
  RETURN_IF_ERROR(Project(LlamaView(a->act), F, w.Matrix(kLlDown), C, M, t, C));
  k::ResidualForward(x, t, x, M * C);
  *x_out = ActBuffer(mem, dt, M * C);
  x_out->FromFloat(x);
  return absl::OkStatus();
}

absl::Status LlamaBlockBackward(const LlamaBlockDims& d, const UnitWeights& w,
                                const ActBuffer& x_in, const LlamaBlockActs& a,
                                const float* dx_out, float* dx_in, float* grad) {
  const int64_t M = d.rows(), C = d.width, F = d.mlp_width;
  const int64_t H = d.heads, K = d.kv_heads, hd = d.head_dim, A = H * hd;
  const DType dt = d.dtype;
  const k::GroupedQkv g = LlamaGroups(d);
  if (!a.held() || x_in.size() != M * C || d.rope == nullptr) {
    return absl::FailedPreconditionError(
        "llama block backward: the block's input and internal activations must be held");
  }
  const int64_t cw = g.compact_width(), ew = g.expanded_width();
  auto G = [&](int t) { return grad + w.offset(t); };
  float* dx2 = LlamaScratch(0, M * C);
  float* gu = LlamaScratch(1, M * 2 * F);
  float* dact = LlamaScratch(3, M * F);
  float* dgu = LlamaScratch(4, M * 2 * F);
  float* t = LlamaScratch(5, M * std::max(C, A));
  float* x = LlamaScratch(6, M * C);
  float* dqkv = LlamaScratch(7, M * ew);
  float* dqkvc = LlamaScratch(8, M * cw);
  std::copy(dx_out, dx_out + M * C, dx2);
  // MLP.
  a.gu.ToFloat(gu);
  RETURN_IF_ERROR(ProjectBackward(dx_out, C, LlamaView(a.act), F, w.Matrix(kLlDown), C, M,
                                  dact, false, G(kLlDown)));
  RETURN_IF_ERROR(k::SwiGluBackward(gu, dact, M, F, dgu));
  const k::ConstTensor wg = w.Matrix(kLlGate), wu = w.Matrix(kLlUp);
  if (Adjacent(wg, F * C, wu) && G(kLlUp) == G(kLlGate) + F * C) {
    RETURN_IF_ERROR(ProjectBackward(dgu, 2 * F, LlamaView(a.h2), C, wg, 2 * F, M, t, false,
                                    G(kLlGate)));
  } else {
    RETURN_IF_ERROR(ProjectBackward(dgu, 2 * F, LlamaView(a.h2), C, wg, F, M, t, false,
                                    G(kLlGate)));
    RETURN_IF_ERROR(ProjectBackward(dgu + F, 2 * F, LlamaView(a.h2), C, wu, F, M, t, true,
                                    G(kLlUp)));
  }
  a.x2.ToFloat(x);
  RETURN_IF_ERROR(k::RmsNormBackward(t, x, w.Vector(kLlNorm2), a.rstd2.f32(), M, C, dx2,
                                     G(kLlNorm2)));
  // Attention.
  RETURN_IF_ERROR(ProjectBackward(dx2, C, LlamaView(a.atty), A, w.Matrix(kLlO), C, M, t, false,
                                  G(kLlO)));
  const k::AttentionShape as{d.batch, d.seq, A, H, dt};
  RETURN_IF_ERROR(k::AttentionBackward(as, a.qkv.data(), a.probs.data(), t, dqkv));
  RETURN_IF_ERROR(k::ReduceGroupedQkvGrad(g, dqkv, M, dqkvc));
  RETURN_IF_ERROR(k::RopeBackward(*d.rope, dqkvc, M, H + K, cw));
  const k::ConstTensor wq = w.Matrix(kLlQ), wk = w.Matrix(kLlK), wv = w.Matrix(kLlV);
  if (Adjacent(wq, H * hd * C, wk) && Adjacent(wk, K * hd * C, wv) &&
      G(kLlK) == G(kLlQ) + H * hd * C && G(kLlV) == G(kLlK) + K * hd * C) {
    RETURN_IF_ERROR(ProjectBackward(dqkvc, cw, LlamaView(a.h1), C, wq, cw, M, t, false,
                                    G(kLlQ)));
  } else {
    RETURN_IF_ERROR(ProjectBackward(dqkvc, cw, LlamaView(a.h1), C, wq, H * hd, M, t, false,
                                    G(kLlQ)));
    RETURN_IF_ERROR(ProjectBackward(dqkvc + H * hd, cw, LlamaView(a.h1), C, wk, K * hd, M, t,
                                    true, G(kLlK)));
    RETURN_IF_ERROR(ProjectBackward(dqkvc + (H + K) * hd, cw, LlamaView(a.h1), C, wv, K * hd,
                                    M, t, true, G(kLlV)));
  }
  std::copy(dx2, dx2 + M * C, dx_in);
  x_in.ToFloat(x);
  return k::RmsNormBackward(t, x, w.Vector(kLlNorm1), a.rstd1.f32(), M, C, dx_in,
                            G(kLlNorm1));
}

}  // namespace zeroshard::model
