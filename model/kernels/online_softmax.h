// The per-row arithmetic of causal attention with an online softmax
// (FlashAttention's recurrence), written once for the host and a CUDA device
// (common/host_device.h): the CUDA kernels (model/kernels/cuda/
// online_attention.h) run it per query or key row over tiles of
// kOnlineKeyTile rows staged in shared memory; the CPU twin
// (model/kernels/cpu/online_attention.h) runs the same calls over the same
// tiles in plain loops, so the twin's results are the device's up to the
// device's expf/logf.
//
// Forward, for query row i over keys j <= i, tile by tile:
//   s_j = scale * q_i . k_j;  m' = max(m, max_j s_j);  c = exp(m - m')
//   l = l * c + sum_j exp(s_j - m');  acc = acc * c + sum_j exp(s_j - m') v_j
// then y_i = acc / l and lse_i = m + log(l): the probabilities are never
// stored. The backward recomputes p_ij = exp(s_ij - lse_i) from the saved
// lse, with D_i = dy_i . y_i:
//   dv_j += p_ij dy_i;  ds_ij = p_ij (dy_i . v_j - D_i)
//   dq_i += scale ds_ij k_j;  dk_j += scale ds_ij q_i
// Every dot product sums in index order; every sum over a tile runs in row
// order.
#ifndef ZEROSHARD_MODEL_KERNELS_ONLINE_SOFTMAX_H_
#define ZEROSHARD_MODEL_KERNELS_ONLINE_SOFTMAX_H_

#include <math.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/host_device.h"
#include "model/kernels/attention_shape.h"

namespace zeroshard::kernels {

// Keys (forward, dQ) or queries (dK, dV) per tile.
inline constexpr int kOnlineKeyTile = 32;

// The shapes the online attention takes (host and device): positive sizes,
// C divisible by H, a head dimension of 16, 32, 64 or 128 (the row
// functions are instantiated for those), FP32 or BF16 qkv.
inline absl::Status CheckOnlineAttentionShape(const AttentionShape& s) {
  if (s.batch <= 0 || s.seq <= 0 || s.width <= 0 || s.heads <= 0 ||
      s.width % s.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "online attention: bad shape B=", s.batch, " T=", s.seq, " C=",
        s.width, " H=", s.heads));
  }
  const int64_t hd = s.width / s.heads;
  if (hd != 16 && hd != 32 && hd != 64 && hd != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "online attention: head dimension ", hd,
        " is not 16, 32, 64 or 128"));
  }
  if (s.dtype != DType::kFp32 && s.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(
        "online attention: qkv must be fp32 or bf16");
  }
  return absl::OkStatus();
}

// A query row's running maximum and sum of exponentials.
struct OnlineRow {
  float m;
  float l;
};

ZS_HOST_DEVICE inline OnlineRow OnlineRowStart() { return {-INFINITY, 0.0f}; }

template <int HD>
ZS_HOST_DEVICE inline float RowDot(const float* a, const float* b) {
  float s = 0.0f;
  for (int d = 0; d < HD; ++d) s += a[d] * b[d];
  return s;
}

// Folds the scores s[0..n) (n >= 1) of one tile into the row; on return
// s[j] = exp(s_j - m') and the result is the factor c by which the row's
// accumulator must be scaled before the tile's weighted values are added.
ZS_HOST_DEVICE inline float OnlineRowFold(OnlineRow* r, float* s, int n) {
  float mt = r->m;
  for (int j = 0; j < n; ++j) mt = fmaxf(mt, s[j]);
  const float c = expf(r->m - mt);  // 0 on the first tile (m = -inf)
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = expf(s[j] - mt);
    sum += s[j];
  }
  r->l = r->l * c + sum;
  r->m = mt;
  return c;
}

ZS_HOST_DEVICE inline float OnlineRowLse(const OnlineRow& r) {
  return r.m + logf(r.l);
}

// One tile of the forward for a query row: keys k[j*HD..], values v[j*HD..]
// for j < n (all of them <= i).
template <int HD>
ZS_HOST_DEVICE inline void OnlineForwardTile(const float* q, const float* k,
                                             const float* v, int n,
                                             float scale, OnlineRow* r,
                                             float* acc) {
  float s[kOnlineKeyTile];
  for (int j = 0; j < n; ++j) s[j] = scale * RowDot<HD>(q, k + j * HD);
  const float c = OnlineRowFold(r, s, n);
  for (int d = 0; d < HD; ++d) {
    float a = acc[d] * c;
    for (int j = 0; j < n; ++j) a += s[j] * v[j * HD + d];
    acc[d] = a;
  }
}

// p_ij, recomputed in the backward from the saved lse_i.
template <int HD>
ZS_HOST_DEVICE inline float OnlineProb(const float* q, const float* k,
                                       float scale, float lse) {
  return expf(scale * RowDot<HD>(q, k) - lse);
}

// One tile of dQ for a query row (keys j < n, all <= i).
template <int HD>
ZS_HOST_DEVICE inline void OnlineBackwardQueryTile(
    const float* q, const float* dy, float lse, float dsum, const float* k,
    const float* v, int n, float scale, float* dq) {
  for (int j = 0; j < n; ++j) {
    const float p = OnlineProb<HD>(q, k + j * HD, scale, lse);
    const float ds = p * (RowDot<HD>(dy, v + j * HD) - dsum);
    for (int d = 0; d < HD; ++d) dq[d] += scale * ds * k[j * HD + d];
  }
}

// One tile of dK and dV for a key row: queries q[i*HD..], their dy, lse and
// D for first <= i < n (the rows before `first` are above the diagonal).
template <int HD>
ZS_HOST_DEVICE inline void OnlineBackwardKeyTile(
    const float* k, const float* v, const float* q, const float* dy,
    const float* lse, const float* dsum, int first, int n, float scale,
    float* dk, float* dv) {
  for (int i = first; i < n; ++i) {
    const float p = OnlineProb<HD>(q + i * HD, k, scale, lse[i]);
    const float ds = p * (RowDot<HD>(dy + i * HD, v) - dsum[i]);
    for (int d = 0; d < HD; ++d) {
      dv[d] += p * dy[i * HD + d];
      dk[d] += scale * ds * q[i * HD + d];
    }
  }
}

}  // namespace zeroshard::kernels

#endif  // ZEROSHARD_MODEL_KERNELS_ONLINE_SOFTMAX_H_
