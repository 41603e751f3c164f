#include "worker/kernels/cpu/linear.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/kernels/cpu/bf16_convert.h"
#include "worker/kernels/cpu/gemm.h"

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
    for (int64_t i = 0; i < m; ++i) {
      float* row = y + i * out;
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
    for (int64_t i = 0; i < m; ++i) {
      const float* row = dy + i * out;
      for (int64_t j = 0; j < out; ++j) dbias[j] += row[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
