#include "model/kernels/cuda/layernorm.h"

#include <cub/block/block_reduce.cuh>

#include "model/kernels/cuda/launch.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels::cuda {
namespace {

using BlockSum = cub::BlockReduce<float, kThreads>;

// The sum of `v` over the block, returned to every thread.
__device__ float BlockAllSum(float v, BlockSum::TempStorage& tmp,
                             float* broadcast) {
  const float total = BlockSum(tmp).Sum(v);
  if (threadIdx.x == 0) *broadcast = total;
  __syncthreads();
  const float out = *broadcast;
  __syncthreads();  // tmp and broadcast are reused by the next call
  return out;
}

__global__ void LayerNormForwardKernel(const float* __restrict__ x,
                                       const float* __restrict__ gamma,
                                       const float* __restrict__ beta, int c,
                                       float* __restrict__ y,
                                       float* __restrict__ mean,
                                       float* __restrict__ rstd) {
  __shared__ BlockSum::TempStorage tmp;
  __shared__ float broadcast;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * c;
  float s = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) s += xr[j];
  const float mu = LayerNormMean(BlockAllSum(s, tmp, &broadcast), c);
  float ss = 0;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    const float d = xr[j] - mu;
    ss += d * d;
  }
  const float rs = LayerNormRstd(BlockAllSum(ss, tmp, &broadcast), c);
  float* yr = y + row * c;
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    yr[j] = LayerNormElement(xr[j], mu, rs, gamma[j], beta[j]);
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// Rows row0, row0 + gridDim.x, ...: dx += per element; this block's partial
// dgamma / dbeta per channel into part_g / part_b [gridDim.x, c] (each
// channel's partial belongs to one thread, summed in row order). With
// kInRegisters (c <= kMaxRegisterColumns) a thread's partials stay in
// registers and are written once; otherwise they are added in place.
constexpr int kColumnsPerThread = 8;
constexpr int64_t kMaxRegisterColumns = int64_t{kColumnsPerThread} * kThreads;

template <bool kInRegisters>
__global__ void LayerNormBackwardKernel(
    const float* __restrict__ dy, const float* __restrict__ x,
    const float* __restrict__ gamma, const float* __restrict__ mean,
    const float* __restrict__ rstd, int64_t m, int c, float* __restrict__ dx,
    float* __restrict__ part_g, float* __restrict__ part_b) {
  __shared__ BlockSum::TempStorage tmp;
  __shared__ float broadcast;
  float* pg = part_g + static_cast<int64_t>(blockIdx.x) * c;
  float* pb = part_b + static_cast<int64_t>(blockIdx.x) * c;
  float rg[kColumnsPerThread] = {}, rb[kColumnsPerThread] = {};
  if (!kInRegisters) {
    for (int j = threadIdx.x; j < c; j += kThreads) {
      pg[j] = 0;
      pb[j] = 0;
    }
  }
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const float* dyr = dy + row * c;
    const float* xr = x + row * c;
    const float mu = mean[row], rs = rstd[row];
    float s1 = 0, s2 = 0;
    // Channel j's share of the row sums, and its dgamma / dbeta terms added
    // to *g, *b.
    auto terms = [&](int j, float* g, float* b) {
      const float xhat = (xr[j] - mu) * rs;
      const float dnorm = dyr[j] * gamma[j];
      s1 += dnorm;
      s2 += dnorm * xhat;
      *g += dyr[j] * xhat;
      *b += dyr[j];
    };
    if (kInRegisters) {
#pragma unroll
      for (int k = 0; k < kColumnsPerThread; ++k) {
        const int j = threadIdx.x + k * kThreads;
        if (j < c) terms(j, &rg[k], &rb[k]);
      }
    } else {
      for (int j = threadIdx.x; j < c; j += kThreads) terms(j, &pg[j], &pb[j]);
    }
    const float mean_dnorm = BlockAllSum(s1, tmp, &broadcast) / c;
    const float mean_dnorm_xhat = BlockAllSum(s2, tmp, &broadcast) / c;
    float* dxr = dx + row * c;
    for (int j = threadIdx.x; j < c; j += kThreads) {
      const float xhat = (xr[j] - mu) * rs;
      dxr[j] += LayerNormBackwardElement(dyr[j], gamma[j], xhat, rs,
                                         mean_dnorm, mean_dnorm_xhat);
    }
  }
  if (kInRegisters) {
#pragma unroll
    for (int k = 0; k < kColumnsPerThread; ++k) {
      const int j = threadIdx.x + k * kThreads;
      if (j < c) {
        pg[j] = rg[k];
        pb[j] = rb[k];
      }
    }
  }
}

// dgamma[j] += the sum over the row kernel's blocks of part_g[b, j] (and
// dbeta of part_b). A block is 32 adjacent channels x 32 groups of parts:
// each thread sums the parts of its group (b = group, group + 32, ...) in
// order, reading a coalesced row of 32 channels per warp, then the first
// group adds the 32 group sums in group order. The same order every run.
constexpr int kSumColumns = 32;
constexpr int kSumGroups = 32;

__global__ void SumPartsKernel(const float* __restrict__ part_g,
                               const float* __restrict__ part_b, int blocks,
                               int c, float* __restrict__ dgamma,
                               float* __restrict__ dbeta) {
  __shared__ float sg[kSumGroups][kSumColumns];
  __shared__ float sb[kSumGroups][kSumColumns];
  const int col = threadIdx.x % kSumColumns, group = threadIdx.x / kSumColumns;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kSumColumns + col;
  float g = 0, b = 0;
  if (j < c) {
    for (int k = group; k < blocks; k += kSumGroups) {
      g += part_g[static_cast<int64_t>(k) * c + j];
      b += part_b[static_cast<int64_t>(k) * c + j];
    }
  }
  sg[group][col] = g;
  sb[group][col] = b;
  __syncthreads();
  if (group == 0 && j < c) {
    float tg = 0, tb = 0;
    for (int q = 0; q < kSumGroups; ++q) {
      tg += sg[q][col];
      tb += sb[q][col];
    }
    dgamma[j] += tg;
    dbeta[j] += tb;
  }
}

absl::Status CheckRows(const char* op, int64_t m, int64_t c) {
  if (m <= 0 || c <= 0 || m > (int64_t{1} << 31) - 1 || c > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes must be positive (m < 2^31 rows, c <= 2^30): m=", m,
        " c=", c));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LayerNormForward(const float* x, const float* gamma,
                              const float* beta, int64_t m, int64_t c,
                              float* y, float* mean, float* rstd,
                              cudaStream_t stream) {
  const char* op = "cuda::LayerNormForward";
  if (absl::Status s = CheckRows(op, m, c); !s.ok()) return s;
  if (absl::Status s =
          CheckElementwise(op, m * c, {x, gamma, beta, y, mean, rstd});
      !s.ok()) {
    return s;
  }
  LayerNormForwardKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      x, gamma, beta, static_cast<int>(c), y, mean, rstd);
  return LaunchStatus(op);
}

absl::Status LayerNormBackward(const float* dy, const float* x,
                               const float* gamma, const float* mean,
                               const float* rstd, int64_t m, int64_t c,
                               float* dx, float* dgamma, float* dbeta,
                               cudaStream_t stream) {
  const char* op = "cuda::LayerNormBackward";
  if (absl::Status s = CheckRows(op, m, c); !s.ok()) return s;
  if (absl::Status s = CheckElementwise(
          op, m * c, {dy, x, gamma, mean, rstd, dx, dgamma, dbeta});
      !s.ok()) {
    return s;
  }
  // Enough blocks to fill a device; each sums its rows' dgamma partials.
  const int blocks = static_cast<int>(m < 1024 ? m : 1024);
  float* parts = nullptr;
  const size_t part_bytes = sizeof(float) * 2 * static_cast<size_t>(blocks) * c;
  if (absl::Status s = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&parts), part_bytes, stream),
          absl::StrCat(op, ": scratch of ", part_bytes, " B"));
      !s.ok()) {
    return s;
  }
  float* part_g = parts;
  float* part_b = parts + static_cast<size_t>(blocks) * c;
  if (c <= kMaxRegisterColumns) {
    LayerNormBackwardKernel<true><<<blocks, kThreads, 0, stream>>>(
        dy, x, gamma, mean, rstd, m, static_cast<int>(c), dx, part_g, part_b);
  } else {
    LayerNormBackwardKernel<false><<<blocks, kThreads, 0, stream>>>(
        dy, x, gamma, mean, rstd, m, static_cast<int>(c), dx, part_g, part_b);
  }
  const absl::Status rows = LaunchStatus(op);
  if (rows.ok()) {
    const int64_t grid = (c + kSumColumns - 1) / kSumColumns;
    SumPartsKernel<<<static_cast<unsigned>(grid), kSumColumns * kSumGroups, 0,
                     stream>>>(part_g, part_b, blocks, static_cast<int>(c),
                               dgamma, dbeta);
  }
  const absl::Status launched = rows.ok() ? LaunchStatus(op) : rows;
  // Freed in stream order, after the kernels that use it.
  const absl::Status freed =
      CudaStatus(cudaFreeAsync(parts, stream), absl::StrCat(op, ": scratch"));
  return launched.ok() ? freed : launched;
}

}  // namespace zeroshard::kernels::cuda
