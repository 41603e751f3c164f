#include "model/kernels/cuda/llama_ops.h"

#include <cub/block/block_reduce.cuh>

#include "absl/strings/str_cat.h"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/llama_math.h"

namespace zeroshard::kernels::cuda {
namespace {

using LlamaBlockSum = cub::BlockReduce<float, kThreads>;

#define ZS_LLAMA_FOR_EACH(i, n)                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x +         \
                   threadIdx.x;                                            \
       i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ float LlamaRowSum(float v, LlamaBlockSum::TempStorage& tmp, float* broadcast) {
  const float total = LlamaBlockSum(tmp).Sum(v);
  if (threadIdx.x == 0) *broadcast = total;
  __syncthreads();
  const float out = *broadcast;
  __syncthreads();
  return out;
}

__global__ void RmsNormForwardKernel(const float* __restrict__ x,
                                     const float* __restrict__ g, int c, float eps,
                                     float* __restrict__ y, float* __restrict__ rstd) {
  __shared__ LlamaBlockSum::TempStorage tmp;
  __shared__ float broadcast;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float ss = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) ss += xr[j] * xr[j];
  const float rs = RmsNormRstd(LlamaRowSum(ss, tmp, &broadcast), c, eps);
  float* yr = y + row * c;
  for (int j = threadIdx.x; j < c; j += blockDim.x) yr[j] = RmsNormElement(xr[j], rs, g[j]);
  if (threadIdx.x == 0) rstd[row] = rs;
}

__global__ void RmsNormBackwardRowsKernel(const float* __restrict__ dy,
                                          const float* __restrict__ x,
                                          const float* __restrict__ g,
                                          const float* __restrict__ rstd, int c,
                                          float* __restrict__ dx) {
  __shared__ LlamaBlockSum::TempStorage tmp;
  __shared__ float broadcast;
  const int64_t row = blockIdx.x;
  const float* dyr = dy + row * c;
  const float* xr = x + row * c;
  const float rs = rstd[row];
  float dot = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) dot += RmsNormDotTerm(dyr[j], xr[j], rs, g[j]);
  const float mean = LlamaRowSum(dot, tmp, &broadcast) / static_cast<float>(c);
  float* dxr = dx + row * c;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    dxr[j] += RmsNormBackwardElement(dyr[j], xr[j], rs, g[j], mean);
  }
}

// One thread per channel, the rows in order: the twin's order.
__global__ void RmsNormGainGradKernel(const float* __restrict__ dy,
                                      const float* __restrict__ x,
                                      const float* __restrict__ rstd, int64_t m, int c,
                                      float* __restrict__ dg) {
  ZS_LLAMA_FOR_EACH(j, c) {
    float acc = 0;
    for (int64_t r = 0; r < m; ++r) acc += dy[r * c + j] * (x[r * c + j] * rstd[r]);
    dg[j] += acc;
  }
}

__global__ void RopeKernel(const float* __restrict__ cosv, const float* __restrict__ sinv,
                           int64_t seq, int64_t half, float* x, int64_t m, int64_t heads,
                           int64_t stride, bool inverse) {
  const int64_t pairs = m * heads * half;
  ZS_LLAMA_FOR_EACH(k, pairs) {
    const int64_t i = k % half;
    const int64_t h = (k / half) % heads;
    const int64_t r = k / (half * heads);
    const int64_t p = r % seq;
    float* v = x + r * stride + h * 2 * half;
    const float c = cosv[p * half + i];
    const float s = inverse ? -sinv[p * half + i] : sinv[p * half + i];
    RopePair(v[i], v[i + half], c, s, &v[i], &v[i + half]);
  }
}

__global__ void SwiGluForwardKernel(const float* __restrict__ gu, int64_t m, int64_t f,
                                    float* __restrict__ a) {
  ZS_LLAMA_FOR_EACH(k, m * f) {
    const int64_t i = k / f, j = k % f;
    a[k] = SwiGluElement(gu[i * 2 * f + j], gu[i * 2 * f + f + j]);
  }
}

__global__ void SwiGluBackwardKernel(const float* __restrict__ gu,
                                     const float* __restrict__ da, int64_t m, int64_t f,
                                     float* __restrict__ dgu) {
  ZS_LLAMA_FOR_EACH(k, m * f) {
    const int64_t i = k / f, j = k % f;
    SwiGluGradElements(gu[i * 2 * f + j], gu[i * 2 * f + f + j], da[k],
                       &dgu[i * 2 * f + j], &dgu[i * 2 * f + f + j]);
  }
}

__global__ void ExpandKvKernel(const float* __restrict__ compact, int64_t m, int64_t h,
                             int64_t kv, int64_t d, float* __restrict__ out) {
  const int64_t ew = 3 * h * d, cw = (h + 2 * kv) * d, rep = h / kv;
  ZS_LLAMA_FOR_EACH(k, m * ew) {
    const int64_t r = k / ew, col = k % ew, part = col / (h * d);
    const int64_t head = (col % (h * d)) / d, e = col % d;
    const int64_t src = part == 0 ? head : (part == 1 ? h + head / rep : h + kv + head / rep);
    out[k] = compact[r * cw + src * d + e];
  }
}

__global__ void ReduceKvKernel(const float* __restrict__ dexp, int64_t m, int64_t h,
                             int64_t kv, int64_t d, float* __restrict__ out) {
  const int64_t ew = 3 * h * d, cw = (h + 2 * kv) * d, rep = h / kv;
  ZS_LLAMA_FOR_EACH(k, m * cw) {
    const int64_t r = k / cw, col = k % cw, head = col / d, e = col % d;
    const float* row = dexp + r * ew;
    if (head < h) {
      out[k] = row[head * d + e];
      continue;
    }
    const int64_t part = head < h + kv ? 1 : 2;
    const int64_t g = head - (part == 1 ? h : h + kv);
    float acc = row[(part * h + g * rep) * d + e];
    for (int64_t j = 1; j < rep; ++j) acc += row[(part * h + g * rep + j) * d + e];
    out[k] = acc;
  }
}

#undef ZS_LLAMA_FOR_EACH

absl::Status CheckLlamaRows(const char* op, int64_t m, int64_t c,
                       std::initializer_list<const void*> ptrs) {
  if (m <= 0 || c <= 0 || c > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": sizes must be positive: m=", m, " c=", c));
  }
  return CheckElementwise(op, m * c, ptrs);
}

}  // namespace

absl::Status RmsNormForward(const float* x, const float* g, int64_t m, int64_t c,
                            float eps, float* y, float* rstd, cudaStream_t stream) {
  if (absl::Status s = CheckLlamaRows("cuda::RmsNormForward", m, c, {x, g, y, rstd}); !s.ok()) {
    return s;
  }
  if (!(eps > 0)) return absl::InvalidArgumentError("cuda::RmsNormForward: eps must be > 0");
  RmsNormForwardKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      x, g, static_cast<int>(c), eps, y, rstd);
  return LaunchStatus("cuda::RmsNormForward");
}

absl::Status RmsNormBackward(const float* dy, const float* x, const float* g,
                             const float* rstd, int64_t m, int64_t c, float* dx,
                             float* dg, cudaStream_t stream) {
  if (absl::Status s = CheckLlamaRows("cuda::RmsNormBackward", m, c, {dy, x, g, rstd, dx, dg});
      !s.ok()) {
    return s;
  }
  RmsNormBackwardRowsKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      dy, x, g, rstd, static_cast<int>(c), dx);
  RmsNormGainGradKernel<<<GridFor(c), kThreads, 0, stream>>>(dy, x, rstd, m,
                                                              static_cast<int>(c), dg);
  return LaunchStatus("cuda::RmsNormBackward");
}

absl::Status RopeApply(const float* cos, const float* sin, int64_t seq,
                       int64_t head_dim, float* x, int64_t m, int64_t heads,
                       int64_t stride, bool inverse, cudaStream_t stream) {
  if (seq < 1 || head_dim < 2 || head_dim % 2 != 0 || m <= 0 || m % seq != 0 ||
      heads <= 0 || stride < heads * head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::RopeApply: ", m, " rows (a multiple of seq ", seq, ") of ", heads,
        " heads of ", head_dim, " (even) in rows of ", stride));
  }
  if (absl::Status s = CheckElementwise("cuda::RopeApply", m * stride, {cos, sin, x}); !s.ok()) {
    return s;
  }
  const int64_t pairs = m * heads * (head_dim / 2);
  RopeKernel<<<GridFor(pairs), kThreads, 0, stream>>>(cos, sin, seq, head_dim / 2, x, m,
                                                      heads, stride, inverse);
  return LaunchStatus("cuda::RopeApply");
}

absl::Status SwiGluForward(const float* gu, int64_t m, int64_t f, float* a,
                           cudaStream_t stream) {
  if (absl::Status s = CheckLlamaRows("cuda::SwiGluForward", m, f, {gu, a}); !s.ok()) return s;
  SwiGluForwardKernel<<<GridFor(m * f), kThreads, 0, stream>>>(gu, m, f, a);
  return LaunchStatus("cuda::SwiGluForward");
}

absl::Status SwiGluBackward(const float* gu, const float* da, int64_t m, int64_t f,
                            float* dgu, cudaStream_t stream) {
  if (absl::Status s = CheckLlamaRows("cuda::SwiGluBackward", m, f, {gu, da, dgu}); !s.ok()) {
    return s;
  }
  SwiGluBackwardKernel<<<GridFor(m * f), kThreads, 0, stream>>>(gu, da, m, f, dgu);
  return LaunchStatus("cuda::SwiGluBackward");
}

absl::Status ExpandGroupedQkv(const cpu::GroupedQkv& g, const float* compact,
                              int64_t m, float* expanded, cudaStream_t stream) {
  if (absl::Status s = cpu::ValidateGroupedQkv(g); !s.ok()) return s;
  if (absl::Status s = CheckLlamaRows("cuda::ExpandGroupedQkv", m, g.expanded_width(),
                                 {compact, expanded});
      !s.ok()) {
    return s;
  }
  ExpandKvKernel<<<GridFor(m * g.expanded_width()), kThreads, 0, stream>>>(
      compact, m, g.heads, g.kv_heads, g.head_dim, expanded);
  return LaunchStatus("cuda::ExpandGroupedQkv");
}

absl::Status ReduceGroupedQkvGrad(const cpu::GroupedQkv& g, const float* dexpanded,
                                  int64_t m, float* dcompact, cudaStream_t stream) {
  if (absl::Status s = cpu::ValidateGroupedQkv(g); !s.ok()) return s;
  if (absl::Status s = CheckLlamaRows("cuda::ReduceGroupedQkvGrad", m, g.compact_width(),
                                 {dexpanded, dcompact});
      !s.ok()) {
    return s;
  }
  ReduceKvKernel<<<GridFor(m * g.compact_width()), kThreads, 0, stream>>>(
      dexpanded, m, g.heads, g.kv_heads, g.head_dim, dcompact);
  return LaunchStatus("cuda::ReduceGroupedQkvGrad");
}

}  // namespace zeroshard::kernels::cuda
