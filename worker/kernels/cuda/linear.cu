#include "worker/kernels/cuda/linear.h"

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "worker/kernels/cuda/elementwise.h"
#include "worker/kernels/cuda/launch.h"
#include "worker/kernels/gemm_desc.h"

namespace zeroshard::kernels::cuda {
namespace {

// One thread per column: a warp reads 32 adjacent columns of a row at once
// (coalesced), and each column adds its rows in order, as the CPU does.
__global__ void ColumnSumKernel(const float* __restrict__ dy, int64_t m,
                                int64_t n, float* __restrict__ dbias) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float acc = dbias[j];
  for (int64_t i = 0; i < m; ++i) acc += dy[i * n + j];
  dbias[j] = acc;
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
  const unsigned grid = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  ColumnSumKernel<<<grid, kThreads, 0, stream>>>(dy, m, n, dbias);
  return LaunchStatus("cuda::ColumnSumAccumulate");
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
  if (absl::Status s = gemm_->Run(g, stream); !s.ok() || fused) return s;
  AddBiasKernel<<<GridFor(m * out), kThreads, 0, stream>>>(y, bias, m, out);
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
  if (dbias != nullptr) return ColumnSumAccumulate(dy, m, out, dbias, stream);
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cuda
