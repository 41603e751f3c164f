#include "model/kernels/cuda/linear.h"

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "model/kernels/cuda/elementwise.h"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/element_math.h"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::kernels::cuda {
namespace {

// The bias gradient in kColumnSumRows chunks (element_math.h), the CPU's
// order. Pass 1: a thread per (column, chunk) sums the chunk's rows in order
// from 0 into part[chunk, column]; a warp is 32 adjacent columns of one
// chunk, so each row's read is coalesced, and the grid's chunks spread the
// rows over the whole device.
constexpr int kColumnsPerBlock = 32;
constexpr int kChunksPerBlock = kThreads / kColumnsPerBlock;

__global__ void ColumnChunkSumKernel(const float* __restrict__ dy, int64_t m,
                                     int64_t n, float* __restrict__ part) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock +
                    threadIdx.x % kColumnsPerBlock;
  const int64_t chunk = static_cast<int64_t>(blockIdx.y) * kChunksPerBlock +
                        threadIdx.x / kColumnsPerBlock;
  const int64_t i0 = chunk * kColumnSumRows;
  if (j >= n || i0 >= m) return;
  const int64_t i1 = i0 + kColumnSumRows < m ? i0 + kColumnSumRows : m;
  float acc = 0;
  for (int64_t i = i0; i < i1; ++i) acc += dy[i * n + j];
  part[chunk * n + j] = acc;
}

// Pass 2: dbias[j] += part[0, j] + part[1, j] + ..., in chunk order.
__global__ void AddChunkSumsKernel(const float* __restrict__ part,
                                   int64_t chunks, int64_t n,
                                   float* __restrict__ dbias) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < n; j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = dbias[j];
    for (int64_t c = 0; c < chunks; ++c) acc += part[c * n + j];
    dbias[j] = acc;
  }
}

// y[i, j] += bias[j]: the bias when it cannot ride in the epilogue.
__global__ void AddBiasKernel(float* __restrict__ y, const float* __restrict__ bias,
                              int64_t m, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < m * n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[e] += bias[e % n];
  }
}

absl::Status CheckSizes(const char* op, int64_t m, int64_t in, int64_t out) {
  if (m <= 0 || in <= 0 || out <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes must be positive: m=", m, " in=", in, " out=", out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ColumnSumAccumulate(const float* dy, int64_t m, int64_t n,
                                 float* dbias, cudaStream_t stream) {
  if (m < 0 || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda::ColumnSumAccumulate: negative size m=", m, " n=", n));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (dy == nullptr || dbias == nullptr) {
    return absl::InvalidArgumentError(
        "cuda::ColumnSumAccumulate: dy and dbias must be set");
  }
  const char* op = "cuda::ColumnSumAccumulate";
  const int64_t chunks = (m + kColumnSumRows - 1) / kColumnSumRows;
  const int64_t grid_x = (n + kColumnsPerBlock - 1) / kColumnsPerBlock;
  const int64_t grid_y = (chunks + kChunksPerBlock - 1) / kChunksPerBlock;
  if (grid_x > 0x7fffffff || grid_y > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", m, " rows x ", n, " columns exceed one launch"));
  }
  float* part = nullptr;
  const size_t part_bytes = sizeof(float) * static_cast<size_t>(chunks * n);
  if (absl::Status s = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&part), part_bytes, stream),
          absl::StrCat(op, ": scratch of ", part_bytes, " B"));
      !s.ok()) {
    return s;
  }
  ColumnChunkSumKernel<<<dim3(static_cast<unsigned>(grid_x),
                              static_cast<unsigned>(grid_y)),
                         kThreads, 0, stream>>>(dy, m, n, part);
  absl::Status launched = LaunchStatus(op);
  if (launched.ok()) {
    AddChunkSumsKernel<<<GridFor(n), kThreads, 0, stream>>>(part, chunks, n,
                                                             dbias);
    launched = LaunchStatus(op);
  }
  // Freed in stream order, after the kernels that use it.
  const absl::Status freed =
      CudaStatus(cudaFreeAsync(part, stream), absl::StrCat(op, ": scratch"));
  return launched.ok() ? freed : launched;
}

absl::Status Linear::Forward(DeviceTensor x, DeviceTensor w, const float* bias,
                             int64_t m, int64_t in, int64_t out, float* y,
                             cudaStream_t stream) {
  if (absl::Status s = CheckSizes("cuda::Linear::Forward", m, in, out); !s.ok()) {
    return s;
  }
  // cuBLASLt's bias epilogue reads the bias in 16-byte vectors; a bias at
  // another alignment is added after the product.
  const bool fused = bias == nullptr ||
                     reinterpret_cast<uintptr_t>(bias) % 16 == 0;
  GemmDesc g{.m = m, .n = out, .k = in,
             .a = {x.data, x.dtype, in, false},
             .b = {w.data, w.dtype, out, false},
             .c = y, .ldc = out, .accumulate = false,
             .bias = fused ? bias : nullptr};
  if (absl::Status s = gemm_->Run(g, stream); !s.ok() || fused) {
    MarkOp(timer_, "matmul fwd");
    return s;
  }
  AddBiasKernel<<<GridFor(m * out), kThreads, 0, stream>>>(y, bias, m, out);
  MarkOp(timer_, "matmul fwd");
  return LaunchStatus("cuda::Linear::Forward: bias");
}

absl::Status Linear::Backward(const float* dy, DeviceTensor x, DeviceTensor w,
                              int64_t m, int64_t in, int64_t out, float* dx,
                              float* dw, float* dbias, cudaStream_t stream) {
  if (absl::Status s = CheckSizes("cuda::Linear::Backward", m, in, out);
      !s.ok()) {
    return s;
  }
  if (dy == nullptr || dw == nullptr) {
    return absl::InvalidArgumentError(
        "cuda::Linear::Backward: dy and dw must be set");
  }
  MatRef dy_ref{dy, DType::kFp32, out, false};
  if (w.dtype == DType::kBf16 && x.dtype == DType::kBf16) {
    const size_t bytes = static_cast<size_t>(m * out) * sizeof(uint16_t);
    if (absl::Status s = dy_bf16_->Reserve(bytes, stream); !s.ok()) return s;
    auto* q = static_cast<uint16_t*>(dy_bf16_->data());
    if (absl::Status s = FloatsToBf16(dy, q, m * out, stream); !s.ok()) return s;
    dy_ref = {q, DType::kBf16, out, false};
    MarkOp(timer_, "casts");
  }
  if (dx != nullptr) {
    GemmDesc g{.m = m, .n = in, .k = out,
               .a = dy_ref, .b = {w.data, w.dtype, out, true},
               .c = dx, .ldc = in, .accumulate = false};
    if (absl::Status s = gemm_->Run(g, stream); !s.ok()) return s;
  }
  GemmDesc g{.m = in, .n = out, .k = m,
             .a = {x.data, x.dtype, in, true}, .b = dy_ref,
             .c = dw, .ldc = out, .accumulate = true};
  if (absl::Status s = gemm_->Run(g, stream); !s.ok()) return s;
  MarkOp(timer_, "matmul bwd");
  if (dbias == nullptr) return absl::OkStatus();
  absl::Status s = ColumnSumAccumulate(dy, m, out, dbias, stream);
  MarkOp(timer_, "bias grad");
  return s;
}

}  // namespace zeroshard::kernels::cuda
