#include "model/kernels/gemm_desc.h"

#include "absl/strings/str_cat.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels {
namespace {

absl::Status CheckOperand(const char* name, const MatRef& x, int64_t rows,
                          int64_t cols) {
  if (x.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm: operand ", name, " is null"));
  }
  if (x.dtype != DType::kFp32 && x.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: operand ", name, " has dtype ", DTypeName(x.dtype),
        "; only fp32 and bf16 are supported"));
  }
  const StoredShape s = StoredShapeOf(x, rows, cols);
  if (x.ld < s.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: operand ", name, " leading dimension ", x.ld, " < ", s.cols));
  }
  return absl::OkStatus();
}

}  // namespace

StoredShape StoredShapeOf(const MatRef& x, int64_t logical_rows,
                          int64_t logical_cols) {
  return x.trans ? StoredShape{logical_cols, logical_rows}
                 : StoredShape{logical_rows, logical_cols};
}

absl::Status ValidateGemm(const GemmDesc& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: sizes must be positive: m=", g.m, " n=", g.n, " k=", g.k));
  }
  if (g.c == nullptr || g.ldc < g.n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: bad output (null or ldc ", g.ldc, " < n ", g.n, ")"));
  }
  if (g.batch < 1 || g.stride_a < 0 || g.stride_b < 0 || g.stride_c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm: batch ", g.batch, " must be >= 1 and strides (", g.stride_a,
        ", ", g.stride_b, ", ", g.stride_c, ") non-negative"));
  }
  if (g.batch > 1 && (g.bias != nullptr || g.gelu)) {
    return absl::InvalidArgumentError(
        "gemm: a batched product takes no bias or GELU epilogue");
  }
  if (absl::Status s = CheckOperand("A", g.a, g.m, g.k); !s.ok()) return s;
  return CheckOperand("B", g.b, g.k, g.n);
}

GemmDesc BatchItem(const GemmDesc& g, int64_t i) {
  GemmDesc one = g;
  one.batch = 1;
  one.stride_a = one.stride_b = one.stride_c = 0;
  one.a.data = static_cast<const char*>(g.a.data) +
               i * g.stride_a * static_cast<int64_t>(DTypeSize(g.a.dtype));
  one.b.data = static_cast<const char*>(g.b.data) +
               i * g.stride_b * static_cast<int64_t>(DTypeSize(g.b.dtype));
  one.c = g.c + i * g.stride_c;
  return one;
}

ColumnMajorGemm ToColumnMajor(const GemmDesc& g) {
  // Row-major storage S read column-major is S^T. For the first operand we
  // need op(B)^T [n, k]: B stored plainly is [k, n] row-major, read as
  // B^T [n, k] (no transpose); stored transposed it is B^T [n, k] row-major,
  // read as B [k, n], so cuBLAS transposes it. Likewise for A.
  auto operand = [](const MatRef& x, int64_t logical_rows,
                    int64_t logical_cols) {
    const StoredShape s = StoredShapeOf(x, logical_rows, logical_cols);
    ColumnMajorOperand o;
    o.data = x.data;
    o.dtype = x.dtype;
    o.trans = x.trans;
    o.ld = x.ld;
    o.rows = s.cols;  // column-major view of row-major storage
    o.cols = s.rows;
    return o;
  };
  ColumnMajorGemm cm;
  cm.m = g.n;
  cm.n = g.m;
  cm.k = g.k;
  cm.a = operand(g.b, g.k, g.n);
  cm.b = operand(g.a, g.m, g.k);
  cm.c = g.c;
  cm.ldc = g.ldc;
  cm.beta = g.accumulate ? 1.0f : 0.0f;
  cm.bias = g.bias;
  cm.gelu = g.gelu;
  cm.batch = g.batch;
  cm.stride_a = g.stride_b;  // the operands swap
  cm.stride_b = g.stride_a;
  cm.stride_c = g.stride_c;
  return cm;
}

float GemmEpilogue(const GemmDesc& g, float v, int64_t col) {
  if (g.bias != nullptr) v += g.bias[col];
  return g.gelu ? GeluForwardElement(v) : v;
}

}  // namespace zeroshard::kernels
