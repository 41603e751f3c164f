#include "model/kernels/cpu/linear.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/bf16_convert.h"
#include "model/kernels/cpu/gemm.h"
#include "model/kernels/cpu/threading.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels::cpu {
namespace {

absl::Status CheckSizes(int64_t m, int64_t in, int64_t out) {
  if (m <= 0 || in <= 0 || out <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("linear: sizes must be positive: m=", m, " in=", in, " out=", out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LinearForward(ConstTensor x, ConstTensor w, const float* bias,
                           int64_t m, int64_t in, int64_t out, float* y) {
  if (absl::Status s = CheckSizes(m, in, out); !s.ok()) return s;
  GemmDesc g{.m = m, .n = out, .k = in,
             .a = {x.data, x.dtype, in, false}, .b = {w.data, w.dtype, out, false},
             .c = y, .ldc = out, .accumulate = false};
  if (absl::Status s = Gemm(g); !s.ok()) return s;
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (ParallelWorth(m * out))
    for (int64_t i = 0; i < m; ++i) {
      float* row = y + i * out;
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] += bias[j];
    }
  }
  return absl::OkStatus();
}

absl::Status LinearBackward(const float* dy, ConstTensor x, ConstTensor w,
                            int64_t m, int64_t in, int64_t out, float* dx,
                            float* dw, float* dbias) {
  if (absl::Status s = CheckSizes(m, in, out); !s.ok()) return s;
  if (dy == nullptr || dw == nullptr) {
    return absl::InvalidArgumentError("linear backward: dy and dw must be set");
  }
  // Both products would round an FP32 dy to BF16 against BF16 operands
  // (gemm.h); round it once here instead (same values).
  MatRef dy_ref{dy, DType::kFp32, out, false};
  thread_local std::vector<uint16_t> dy_bf16;
  if (w.dtype == DType::kBf16 && x.dtype == DType::kBf16) {
    dy_bf16.resize(static_cast<size_t>(m * out));
    FloatsToBf16(dy, dy_bf16.data(), m * out);
    dy_ref = {dy_bf16.data(), DType::kBf16, out, false};
  }
  if (dx != nullptr) {
    GemmDesc g{.m = m, .n = in, .k = out,
               .a = dy_ref, .b = {w.data, w.dtype, out, true},
               .c = dx, .ldc = in, .accumulate = false};
    if (absl::Status s = Gemm(g); !s.ok()) return s;
  }
  GemmDesc g{.m = in, .n = out, .k = m,
             .a = {x.data, x.dtype, in, true}, .b = dy_ref,
             .c = dw, .ldc = out, .accumulate = true};
  if (absl::Status s = Gemm(g); !s.ok()) return s;
  if (dbias != nullptr) {
    // Column blocks over the threads; each column sums its rows in chunks
    // of kColumnSumRows (element_math.h), the order the CUDA kernel uses:
    // the same bits for any thread count and on either device.
    constexpr int64_t kCols = 64;
    const int64_t blocks = (out + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * out))
    for (int64_t bl = 0; bl < blocks; ++bl) {
      const int64_t j0 = bl * kCols, n = std::min(out - j0, kCols);
      float acc[kCols];  // a register-resident copy of dbias[j0, j0 + n)
      std::copy(dbias + j0, dbias + j0 + n, acc);
      for (int64_t i0 = 0; i0 < m; i0 += kColumnSumRows) {
        const int64_t i1 = std::min(m, i0 + kColumnSumRows);
        float chunk[kCols] = {};
        for (int64_t i = i0; i < i1; ++i) {
          const float* row = dy + i * out + j0;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) chunk[j] += row[j];
        }
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) acc[j] += chunk[j];
      }
      std::copy(acc, acc + n, dbias + j0);
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
