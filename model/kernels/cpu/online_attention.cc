#include "model/kernels/cpu/online_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/bf16_bits.h"
#include "common/status_macros.h"
#include "model/kernels/online_softmax.h"

namespace zeroshard::kernels::cpu {
namespace {

// One (b, h) pair's Q, K, V rows widened to FP32, [T, HD] each.
template <int HD>
struct HeadRows {
  std::vector<float> q, k, v;
};

template <int HD>
void LoadHead(const AttentionShape& s, const void* qkv, int64_t b, int64_t h,
              HeadRows<HD>* rows) {
  const int64_t T = s.seq, C = s.width;
  rows->q.resize(T * HD);
  rows->k.resize(T * HD);
  rows->v.resize(T * HD);
  std::vector<float>* dst[3] = {&rows->q, &rows->k, &rows->v};
  for (int64_t t = 0; t < T; ++t) {
    const int64_t base = (b * T + t) * 3 * C + h * HD;
    for (int part = 0; part < 3; ++part) {
      float* out = dst[part]->data() + t * HD;
      const int64_t at = base + part * C;
      for (int d = 0; d < HD; ++d) {
        out[d] = s.dtype == DType::kBf16
                     ? Bf16BitsToFloat(
                           static_cast<const uint16_t*>(qkv)[at + d])
                     : static_cast<const float*>(qkv)[at + d];
      }
    }
  }
}

// Head h's columns of row t of a [B, T, C] array.
inline int64_t HeadAt(const AttentionShape& s, int64_t b, int64_t t,
                      int64_t h, int hd) {
  return (b * s.seq + t) * s.width + h * hd;
}

template <int HD>
void Forward(const AttentionShape& s, const void* qkv, float* lse, float* y) {
  const int64_t T = s.seq, H = s.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      HeadRows<HD> r;
      LoadHead<HD>(s, qkv, b, h, &r);
      for (int64_t i = 0; i < T; ++i) {
        OnlineRow row = OnlineRowStart();
        float acc[HD] = {};
        for (int64_t j0 = 0; j0 <= i; j0 += kOnlineKeyTile) {
          const int n = static_cast<int>(
              std::min<int64_t>(kOnlineKeyTile, i + 1 - j0));
          OnlineForwardTile<HD>(r.q.data() + i * HD, r.k.data() + j0 * HD,
                                r.v.data() + j0 * HD, n, scale, &row, acc);
        }
        float* out = y + HeadAt(s, b, i, h, HD);
        for (int d = 0; d < HD; ++d) out[d] = acc[d] / row.l;
        lse[(b * H + h) * T + i] = OnlineRowLse(row);
      }
    }
  }
}

template <int HD>
void Backward(const AttentionShape& s, const void* qkv, const float* lse,
              const float* y, const float* dy, float* dqkv) {
  const int64_t T = s.seq, H = s.heads, C = s.width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      HeadRows<HD> r;
      LoadHead<HD>(s, qkv, b, h, &r);
      std::vector<float> dyh(T * HD), dsum(T);
      const float* lse_h = lse + (b * H + h) * T;
      for (int64_t t = 0; t < T; ++t) {
        const float* dyr = dy + HeadAt(s, b, t, h, HD);
        std::copy(dyr, dyr + HD, dyh.begin() + t * HD);
        dsum[t] = RowDot<HD>(dyr, y + HeadAt(s, b, t, h, HD));
      }
      for (int64_t i = 0; i < T; ++i) {
        float dq[HD] = {};
        for (int64_t j0 = 0; j0 <= i; j0 += kOnlineKeyTile) {
          const int n = static_cast<int>(
              std::min<int64_t>(kOnlineKeyTile, i + 1 - j0));
          OnlineBackwardQueryTile<HD>(r.q.data() + i * HD,
                                      dyh.data() + i * HD, lse_h[i], dsum[i],
                                      r.k.data() + j0 * HD,
                                      r.v.data() + j0 * HD, n, scale, dq);
        }
        float* out = dqkv + (b * T + i) * 3 * C + h * HD;
        std::copy(dq, dq + HD, out);
      }
      for (int64_t j = 0; j < T; ++j) {
        float dk[HD] = {}, dv[HD] = {};
        // Query tiles from the one holding row j (rows before j masked).
        for (int64_t i0 = j / kOnlineKeyTile * kOnlineKeyTile; i0 < T;
             i0 += kOnlineKeyTile) {
          const int n = static_cast<int>(
              std::min<int64_t>(kOnlineKeyTile, T - i0));
          const int first = static_cast<int>(std::max<int64_t>(0, j - i0));
          OnlineBackwardKeyTile<HD>(r.k.data() + j * HD, r.v.data() + j * HD,
                                    r.q.data() + i0 * HD,
                                    dyh.data() + i0 * HD, lse_h + i0,
                                    dsum.data() + i0, first, n, scale, dk,
                                    dv);
        }
        float* out = dqkv + (b * T + j) * 3 * C + h * HD;
        std::copy(dk, dk + HD, out + C);
        std::copy(dv, dv + HD, out + 2 * C);
      }
    }
  }
}

}  // namespace

absl::Status OnlineAttentionForwardTwin(const AttentionShape& s,
                                        const void* qkv, float* lse,
                                        float* y) {
  RETURN_IF_ERROR(CheckOnlineAttentionShape(s));
  if (qkv == nullptr || lse == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("online attention: null buffer");
  }
  switch (s.width / s.heads) {
    case 16: Forward<16>(s, qkv, lse, y); break;
    case 32: Forward<32>(s, qkv, lse, y); break;
    case 64: Forward<64>(s, qkv, lse, y); break;
    default: Forward<128>(s, qkv, lse, y); break;
  }
  return absl::OkStatus();
}

absl::Status OnlineAttentionBackwardTwin(const AttentionShape& s,
                                         const void* qkv, const float* lse,
                                         const float* y, const float* dy,
                                         float* dqkv) {
  RETURN_IF_ERROR(CheckOnlineAttentionShape(s));
  if (qkv == nullptr || lse == nullptr || y == nullptr || dy == nullptr ||
      dqkv == nullptr) {
    return absl::InvalidArgumentError("online attention: null buffer");
  }
  switch (s.width / s.heads) {
    case 16: Backward<16>(s, qkv, lse, y, dy, dqkv); break;
    case 32: Backward<32>(s, qkv, lse, y, dy, dqkv); break;
    case 64: Backward<64>(s, qkv, lse, y, dy, dqkv); break;
    default: Backward<128>(s, qkv, lse, y, dy, dqkv); break;
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
