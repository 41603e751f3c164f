#include "model/kernels/cuda/online_attention.h"

#include <cstdint>

#include "common/bf16_bits.h"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/online_softmax.h"

namespace zeroshard::kernels::cuda {
namespace {

// Query or key rows per block (one thread each).
constexpr int kRows = 64;

__device__ inline float Load(const float* p, int64_t i) { return p[i]; }
__device__ inline float Load(const uint16_t* p, int64_t i) {
  return Bf16BitsToFloat(p[i]);
}

__host__ __device__ inline int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__host__ __device__ inline int64_t Max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

struct Dims {
  int64_t t, c, h;
  float scale;
};

// Element `d` of head h's q (part 0), k (1) or v (2) of token row `row`
// (over the whole batch: b * T + t).
template <int HD, typename T>
__device__ inline float QkvAt(const T* qkv, const Dims& g, int64_t row,
                              int64_t h, int part, int d) {
  return Load(qkv, row * 3 * g.c + part * g.c + h * HD + d);
}

// Stages rows [r0, r0 + kOnlineKeyTile) of q/k/v part `part` of head h into
// `out` ([kOnlineKeyTile, HD], zeros past T).
template <int HD, typename T>
__device__ inline void StageTile(const T* qkv, const Dims& g, int64_t b,
                                 int64_t h, int part, int64_t r0, float* out) {
  for (int e = threadIdx.x; e < kOnlineKeyTile * HD; e += blockDim.x) {
    const int64_t r = r0 + e / HD;
    out[e] = r < g.t ? QkvAt<HD>(qkv, g, b * g.t + r, h, part, e % HD) : 0.0f;
  }
}

template <int HD, typename T>
__global__ void ForwardKernel(const T* qkv, Dims g, float* lse, float* y) {
  __shared__ float ks[kOnlineKeyTile * HD];
  __shared__ float vs[kOnlineKeyTile * HD];
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t i = row0 + threadIdx.x;
  const bool active = i < g.t;
  float q[HD], acc[HD];
  for (int d = 0; d < HD; ++d) {
    q[d] = active ? QkvAt<HD>(qkv, g, b * g.t + i, h, 0, d) : 0.0f;
    acc[d] = 0.0f;
  }
  OnlineRow r = OnlineRowStart();
  const int64_t last = Min64(row0 + kRows, g.t) - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kOnlineKeyTile) {
    StageTile<HD>(qkv, g, b, h, 1, j0, ks);
    StageTile<HD>(qkv, g, b, h, 2, j0, vs);
    __syncthreads();
    if (active && j0 <= i) {
      const int n = static_cast<int>(Min64(kOnlineKeyTile, i + 1 - j0));
      OnlineForwardTile<HD>(q, ks, vs, n, g.scale, &r, acc);
    }
    __syncthreads();
  }
  if (!active) return;
  float* out = y + (b * g.t + i) * g.c + h * HD;
  for (int d = 0; d < HD; ++d) out[d] = acc[d] / r.l;
  lse[(b * g.h + h) * g.t + i] = OnlineRowLse(r);
}

// D_i = dy_i . y_i for every row, [B, H, T].
template <int HD>
__global__ void RowDotKernel(const float* y, const float* dy, Dims g,
                             int64_t rows, float* dsum) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       r < rows; r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = r % g.t, bh = r / g.t, h = bh % g.h, b = bh / g.h;
    const int64_t at = (b * g.t + t) * g.c + h * HD;
    dsum[r] = RowDot<HD>(dy + at, y + at);
  }
}

template <int HD, typename T>
__global__ void QueryKernel(const T* qkv, const float* lse, const float* dy,
                            const float* dsum, Dims g, float* dqkv) {
  __shared__ float ks[kOnlineKeyTile * HD];
  __shared__ float vs[kOnlineKeyTile * HD];
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t i = row0 + threadIdx.x;
  const bool active = i < g.t;
  float q[HD], dyr[HD], dq[HD];
  const int64_t at = (b * g.t + i) * g.c + h * HD;
  for (int d = 0; d < HD; ++d) {
    q[d] = active ? QkvAt<HD>(qkv, g, b * g.t + i, h, 0, d) : 0.0f;
    dyr[d] = active ? dy[at + d] : 0.0f;
    dq[d] = 0.0f;
  }
  const int64_t r = (b * g.h + h) * g.t + i;
  const float l = active ? lse[r] : 0.0f;
  const float ds = active ? dsum[r] : 0.0f;
  const int64_t last = Min64(row0 + kRows, g.t) - 1;
  for (int64_t j0 = 0; j0 <= last; j0 += kOnlineKeyTile) {
    StageTile<HD>(qkv, g, b, h, 1, j0, ks);
    StageTile<HD>(qkv, g, b, h, 2, j0, vs);
    __syncthreads();
    if (active && j0 <= i) {
      const int n = static_cast<int>(Min64(kOnlineKeyTile, i + 1 - j0));
      OnlineBackwardQueryTile<HD>(q, dyr, l, ds, ks, vs, n, g.scale, dq);
    }
    __syncthreads();
  }
  if (!active) return;
  float* out = dqkv + (b * g.t + i) * 3 * g.c + h * HD;
  for (int d = 0; d < HD; ++d) out[d] = dq[d];
}

template <int HD, typename T>
__global__ void KeyKernel(const T* qkv, const float* lse, const float* dy,
                          const float* dsum, Dims g, float* dqkv) {
  __shared__ float qs[kOnlineKeyTile * HD];
  __shared__ float dys[kOnlineKeyTile * HD];
  __shared__ float ls[kOnlineKeyTile];
  __shared__ float dss[kOnlineKeyTile];
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t j = row0 + threadIdx.x;
  const bool active = j < g.t;
  float k[HD], v[HD], dk[HD], dv[HD];
  for (int d = 0; d < HD; ++d) {
    k[d] = active ? QkvAt<HD>(qkv, g, b * g.t + j, h, 1, d) : 0.0f;
    v[d] = active ? QkvAt<HD>(qkv, g, b * g.t + j, h, 2, d) : 0.0f;
    dk[d] = dv[d] = 0.0f;
  }
  const int64_t bh = (b * g.h + h) * g.t;
  for (int64_t i0 = row0 / kOnlineKeyTile * kOnlineKeyTile; i0 < g.t;
       i0 += kOnlineKeyTile) {
    StageTile<HD>(qkv, g, b, h, 0, i0, qs);
    for (int e = threadIdx.x; e < kOnlineKeyTile * HD; e += blockDim.x) {
      const int64_t r = i0 + e / HD;
      dys[e] = r < g.t ? dy[(b * g.t + r) * g.c + h * HD + e % HD] : 0.0f;
    }
    for (int e = threadIdx.x; e < kOnlineKeyTile; e += blockDim.x) {
      const int64_t r = i0 + e;
      ls[e] = r < g.t ? lse[bh + r] : 0.0f;
      dss[e] = r < g.t ? dsum[bh + r] : 0.0f;
    }
    __syncthreads();
    if (active) {
      const int n = static_cast<int>(Min64(kOnlineKeyTile, g.t - i0));
      const int first = static_cast<int>(Max64(0, j - i0));
      if (first < n) {
        OnlineBackwardKeyTile<HD>(k, v, qs, dys, ls, dss, first, n, g.scale,
                                  dk, dv);
      }
    }
    __syncthreads();
  }
  if (!active) return;
  float* out = dqkv + (b * g.t + j) * 3 * g.c + h * HD;
  for (int d = 0; d < HD; ++d) {
    out[g.c + d] = dk[d];
    out[2 * g.c + d] = dv[d];
  }
}

absl::Status Check(const char* op, const AttentionShape& s) {
  RETURN_IF_ERROR(CheckOnlineAttentionShape(s));
  if (s.heads > 65535 || s.batch > 65535 ||
      (s.seq + kRows - 1) / kRows > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": batch ", s.batch, " or heads ", s.heads,
        " over the grid's 65535"));
  }
  return absl::OkStatus();
}

Dims DimsOf(const AttentionShape& s) {
  Dims g;
  g.t = s.seq;
  g.c = s.width;
  g.h = s.heads;
  g.scale = 1.0f / sqrtf(static_cast<float>(s.width / s.heads));
  return g;
}

dim3 RowGridOf(const AttentionShape& s) {
  return dim3(static_cast<unsigned>((s.seq + kRows - 1) / kRows),
              static_cast<unsigned>(s.heads), static_cast<unsigned>(s.batch));
}

template <int HD>
void LaunchForward(const AttentionShape& s, const void* qkv, float* lse,
                   float* y, cudaStream_t stream) {
  const Dims g = DimsOf(s);
  if (s.dtype == DType::kBf16) {
    ForwardKernel<HD><<<RowGridOf(s), kRows, 0, stream>>>(
        static_cast<const uint16_t*>(qkv), g, lse, y);
  } else {
    ForwardKernel<HD><<<RowGridOf(s), kRows, 0, stream>>>(
        static_cast<const float*>(qkv), g, lse, y);
  }
}

template <int HD>
void LaunchBackward(const AttentionShape& s, const void* qkv, const float* lse,
                    const float* y, const float* dy, float* dsum, float* dqkv,
                    cudaStream_t stream) {
  const Dims g = DimsOf(s);
  const int64_t rows = s.batch * s.heads * s.seq;
  RowDotKernel<HD><<<GridFor(rows), kThreads, 0, stream>>>(y, dy, g, rows,
                                                            dsum);
  if (s.dtype == DType::kBf16) {
    const auto* x = static_cast<const uint16_t*>(qkv);
    QueryKernel<HD><<<RowGridOf(s), kRows, 0, stream>>>(x, lse, dy, dsum, g, dqkv);
    KeyKernel<HD><<<RowGridOf(s), kRows, 0, stream>>>(x, lse, dy, dsum, g, dqkv);
  } else {
    const auto* x = static_cast<const float*>(qkv);
    QueryKernel<HD><<<RowGridOf(s), kRows, 0, stream>>>(x, lse, dy, dsum, g, dqkv);
    KeyKernel<HD><<<RowGridOf(s), kRows, 0, stream>>>(x, lse, dy, dsum, g, dqkv);
  }
}

}  // namespace

absl::Status OnlineAttentionForward(const AttentionShape& s, const void* qkv,
                                    float* lse, float* y,
                                    cudaStream_t stream) {
  const char* op = "cuda::OnlineAttentionForward";
  RETURN_IF_ERROR(Check(op, s));
  RETURN_IF_ERROR(CheckElementwise(op, 1, {qkv, lse, y}));
  switch (s.width / s.heads) {
    case 16: LaunchForward<16>(s, qkv, lse, y, stream); break;
    case 32: LaunchForward<32>(s, qkv, lse, y, stream); break;
    case 64: LaunchForward<64>(s, qkv, lse, y, stream); break;
    default: LaunchForward<128>(s, qkv, lse, y, stream); break;
  }
  return LaunchStatus(op);
}

absl::Status OnlineAttentionBackward(const AttentionShape& s, const void* qkv,
                                     const float* lse, const float* y,
                                     const float* dy, float* dqkv,
                                     cudaStream_t stream) {
  const char* op = "cuda::OnlineAttentionBackward";
  RETURN_IF_ERROR(Check(op, s));
  RETURN_IF_ERROR(CheckElementwise(op, 1, {qkv, lse, y, dy, dqkv}));
  const size_t dsum_bytes =
      sizeof(float) * static_cast<size_t>(s.batch * s.heads * s.seq);
  float* dsum = nullptr;
  RETURN_IF_ERROR(CudaStatus(
      cudaMallocAsync(reinterpret_cast<void**>(&dsum), dsum_bytes, stream),
      absl::StrCat(op, ": D scratch of ", dsum_bytes, " B")));
  switch (s.width / s.heads) {
    case 16: LaunchBackward<16>(s, qkv, lse, y, dy, dsum, dqkv, stream); break;
    case 32: LaunchBackward<32>(s, qkv, lse, y, dy, dsum, dqkv, stream); break;
    case 64: LaunchBackward<64>(s, qkv, lse, y, dy, dsum, dqkv, stream); break;
    default: LaunchBackward<128>(s, qkv, lse, y, dy, dsum, dqkv, stream); break;
  }
  const absl::Status launched = LaunchStatus(op);
  const absl::Status freed = CudaStatus(cudaFreeAsync(dsum, stream),
                                        absl::StrCat(op, ": D scratch"));
  return launched.ok() ? freed : launched;
}

}  // namespace zeroshard::kernels::cuda
