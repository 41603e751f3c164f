#include "model/kernels/cuda/attention.h"

#include <math.h>

#include "common/bf16_bits.h"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/cuda/row_block.cuh"

namespace zeroshard::kernels::cuda {
namespace {

// A row's float scores in dynamic shared memory, which with the kernels'
// static shared memory (CUB's temp storage, a broadcast slot) must stay
// within the 48 KiB a launch gets without opting in: 12288 floats would be
// 48 KiB alone.
constexpr int64_t kMaxSeq = 12000;

// An FP32 value as a product operand of the qkv dtype (BF16: rounded).
template <typename E>
__device__ inline float AsOperand(float v);
template <>
__device__ inline float AsOperand<float>(float v) {
  return v;
}
template <>
__device__ inline float AsOperand<uint16_t>(float v) {
  return Bf16BitsToFloat(FloatToBf16Bits(v));
}

struct Geometry {
  int t, c, h, hd;
  int64_t c3;
  float scale;
};

// Block (i, h, b): row i of head h of sequence b.
template <typename E>
__global__ void ForwardKernel(const E* __restrict__ qkv, E* __restrict__ probs,
                              float* __restrict__ y, Geometry g) {
  extern __shared__ float row[];  // scores, then the stored probabilities
  __shared__ BlockFloat::TempStorage tmp;
  __shared__ float broadcast;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const E* base = qkv + static_cast<int64_t>(b) * g.t * g.c3 + h * g.hd;
  const E* q = base + i * g.c3;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const E* k = base + g.c + j * g.c3;
    float dot = 0;
    for (int d = 0; d < g.hd; ++d) dot += Ld(q[d]) * Ld(k[d]);
    row[j] = dot * g.scale;
    mx = fmaxf(mx, row[j]);
  }
  mx = BlockAll(mx, [](float a, float c) { return fmaxf(a, c); }, tmp,
                &broadcast);
  float sum = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    row[j] = expf(row[j] - mx);
    sum += row[j];
  }
  sum = BlockAll(sum, [](float a, float c) { return a + c; }, tmp, &broadcast);
  E* prow = probs + ((static_cast<int64_t>(b) * g.h + h) * g.t + i) * g.t;
  for (int j = threadIdx.x; j < g.t; j += blockDim.x) {
    St(&prow[j], j <= i ? row[j] / sum : 0.0f);
    if (j <= i) row[j] = Ld(prow[j]);  // Y uses P as stored, as on the CPU
  }
  __syncthreads();
  float* yrow = y + (static_cast<int64_t>(b) * g.t + i) * g.c + h * g.hd;
  const E* v = base + 2 * g.c;
  for (int d = threadIdx.x; d < g.hd; d += blockDim.x) {
    float acc = 0;
    for (int j = 0; j <= i; ++j) acc += row[j] * Ld(v[j * g.c3 + d]);
    yrow[d] = acc;
  }
}

// Block (i, h, b): dS row i (into ds, and shared) and dQ_i.
template <typename E>
__global__ void BackwardRowKernel(const E* __restrict__ qkv,
                                  const E* __restrict__ probs,
                                  const float* __restrict__ dy,
                                  float* __restrict__ ds,
                                  float* __restrict__ dqkv, Geometry g) {
  extern __shared__ float row[];  // dP, then dS
  __shared__ BlockFloat::TempStorage tmp;
  __shared__ float broadcast;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const E* base = qkv + static_cast<int64_t>(b) * g.t * g.c3 + h * g.hd;
  const float* dyi = dy + (static_cast<int64_t>(b) * g.t + i) * g.c + h * g.hd;
  const int64_t prow0 = ((static_cast<int64_t>(b) * g.h + h) * g.t + i) * g.t;
  float dot = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const E* v = base + 2 * g.c + j * g.c3;
    float acc = 0;
    for (int d = 0; d < g.hd; ++d) acc += AsOperand<E>(dyi[d]) * Ld(v[d]);
    row[j] = acc;
    dot += acc * Ld(probs[prow0 + j]);
  }
  dot = BlockAll(dot, [](float a, float c) { return a + c; }, tmp, &broadcast);
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float s = AsOperand<E>(Ld(probs[prow0 + j]) * (row[j] - dot) * g.scale);
    row[j] = s;
    ds[prow0 + j] = s;
  }
  __syncthreads();
  float* dq = dqkv + (static_cast<int64_t>(b) * g.t + i) * g.c3 + h * g.hd;
  for (int d = threadIdx.x; d < g.hd; d += blockDim.x) {
    float acc = 0;
    for (int j = 0; j <= i; ++j) acc += row[j] * Ld(base[g.c + j * g.c3 + d]);
    dq[d] = acc;
  }
}

// Block (j, h, b): dK_j = sum_{i >= j} dS_ij Q_i, dV_j = sum_{i >= j} P_ij dY_i.
template <typename E>
__global__ void BackwardColumnKernel(const E* __restrict__ qkv,
                                     const E* __restrict__ probs,
                                     const float* __restrict__ dy,
                                     const float* __restrict__ ds,
                                     float* __restrict__ dqkv, Geometry g) {
  const int j = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const E* base = qkv + static_cast<int64_t>(b) * g.t * g.c3 + h * g.hd;
  const int64_t p0 = (static_cast<int64_t>(b) * g.h + h) * g.t * g.t;
  const float* dyb = dy + static_cast<int64_t>(b) * g.t * g.c + h * g.hd;
  float* out = dqkv + (static_cast<int64_t>(b) * g.t + j) * g.c3 + h * g.hd;
  for (int d = threadIdx.x; d < g.hd; d += blockDim.x) {
    float dk = 0, dv = 0;
    for (int i = j; i < g.t; ++i) {
      const int64_t pij = p0 + static_cast<int64_t>(i) * g.t + j;
      dk += ds[pij] * Ld(base[i * g.c3 + d]);
      dv += Ld(probs[pij]) * AsOperand<E>(dyb[static_cast<int64_t>(i) * g.c + d]);
    }
    out[g.c + d] = dk;
    out[2 * g.c + d] = dv;
  }
}

absl::Status CheckShape(const char* op, const AttentionShape& s) {
  if (s.batch <= 0 || s.seq <= 0 || s.width <= 0 || s.heads <= 0 ||
      s.width % s.heads != 0 || s.seq > kMaxSeq || s.batch > 65535 ||
      s.heads > 65535 || s.width > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad shape batch=", s.batch, " seq=", s.seq, " (at most ",
        kMaxSeq, ") width=", s.width, " heads=", s.heads));
  }
  if (s.dtype != DType::kFp32 && s.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": unsupported dtype ", DTypeName(s.dtype)));
  }
  return absl::OkStatus();
}

Geometry GeometryOf(const AttentionShape& s) {
  Geometry g;
  g.t = static_cast<int>(s.seq);
  g.c = static_cast<int>(s.width);
  g.h = static_cast<int>(s.heads);
  g.hd = g.c / g.h;
  g.c3 = 3 * s.width;
  g.scale = 1.0f / sqrtf(static_cast<float>(g.hd));
  return g;
}

}  // namespace

absl::Status AttentionForward(const AttentionShape& s, const void* qkv,
                              void* probs, float* y, cudaStream_t stream) {
  const char* op = "cuda::AttentionForward";
  RETURN_IF_ERROR(CheckShape(op, s));
  RETURN_IF_ERROR(CheckElementwise(op, 1, {qkv, probs, y}));
  const Geometry g = GeometryOf(s);
  const dim3 grid(static_cast<unsigned>(s.seq), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  const size_t shared = sizeof(float) * static_cast<size_t>(s.seq);
  if (s.dtype == DType::kBf16) {
    ForwardKernel<uint16_t><<<grid, kThreads, shared, stream>>>(
        static_cast<const uint16_t*>(qkv), static_cast<uint16_t*>(probs), y, g);
  } else {
    ForwardKernel<float><<<grid, kThreads, shared, stream>>>(
        static_cast<const float*>(qkv), static_cast<float*>(probs), y, g);
  }
  return LaunchStatus(op);
}

absl::Status AttentionBackward(const AttentionShape& s, const void* qkv,
                               const void* probs, const float* dy, float* dqkv,
                               cudaStream_t stream) {
  const char* op = "cuda::AttentionBackward";
  RETURN_IF_ERROR(CheckShape(op, s));
  RETURN_IF_ERROR(CheckElementwise(op, 1, {qkv, probs, dy, dqkv}));
  const Geometry g = GeometryOf(s);
  const dim3 grid(static_cast<unsigned>(s.seq), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  const size_t shared = sizeof(float) * static_cast<size_t>(s.seq);
  const size_t ds_bytes = sizeof(float) * static_cast<size_t>(s.batch) *
                          s.heads * s.seq * s.seq;
  float* ds = nullptr;
  RETURN_IF_ERROR(CudaStatus(
      cudaMallocAsync(reinterpret_cast<void**>(&ds), ds_bytes, stream),
      absl::StrCat(op, ": dS scratch of ", ds_bytes, " B")));
  if (s.dtype == DType::kBf16) {
    const auto* x = static_cast<const uint16_t*>(qkv);
    const auto* p = static_cast<const uint16_t*>(probs);
    BackwardRowKernel<uint16_t><<<grid, kThreads, shared, stream>>>(
        x, p, dy, ds, dqkv, g);
    BackwardColumnKernel<uint16_t><<<grid, kThreads, 0, stream>>>(
        x, p, dy, ds, dqkv, g);
  } else {
    const auto* x = static_cast<const float*>(qkv);
    const auto* p = static_cast<const float*>(probs);
    BackwardRowKernel<float><<<grid, kThreads, shared, stream>>>(x, p, dy, ds,
                                                                 dqkv, g);
    BackwardColumnKernel<float><<<grid, kThreads, 0, stream>>>(x, p, dy, ds,
                                                               dqkv, g);
  }
  const absl::Status launched = LaunchStatus(op);
  const absl::Status freed =
      CudaStatus(cudaFreeAsync(ds, stream), absl::StrCat(op, ": dS scratch"));
  return launched.ok() ? freed : launched;
}

}  // namespace zeroshard::kernels::cuda
