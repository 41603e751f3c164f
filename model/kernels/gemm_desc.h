// One matrix product, described once: C (FP32) = op(A) * op(B) [+ C], as the
// CPU path (oneDNN, model/kernels/cpu/gemm.h) and the CUDA path (cuBLASLt,
// model/kernels/cuda/gemm.h) both execute it.
//
// Operands are FP32 or BF16, row-major, with a leading dimension and an
// optional transpose; products accumulate in FP32. The layout arithmetic both
// paths need lives here, so it is the same code on both and is tested on the
// CPU (tests/model/kernels_gemm_test.cc): validation (ValidateGemm) and the
// column-major form cuBLAS takes (ToColumnMajor).
//
//   GemmDesc g{.m = M, .n = N, .k = K,
//              .a = {x, DType::kBf16, K}, .b = {w, DType::kBf16, N},
//              .c = y, .ldc = N, .accumulate = false};
//   RETURN_IF_ERROR(ValidateGemm(g));      // y[M,N] = x[M,K] * w[K,N]
//   ColumnMajorGemm cm = ToColumnMajor(g);  // what cublasLtMatmul is given
#ifndef ZEROSHARD_MODEL_KERNELS_GEMM_DESC_H_
#define ZEROSHARD_MODEL_KERNELS_GEMM_DESC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace zeroshard::kernels {

// A row-major matrix operand. `ld` is the row stride (in elements) of the
// matrix as stored; with `trans` the stored matrix is op(X)^T, i.e. it has
// shape [cols, rows] of the logical operand.
struct MatRef {
  const void* data = nullptr;
  DType dtype = DType::kFp32;  // kFp32 or kBf16
  int64_t ld = 0;
  bool trans = false;
};

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;  // C is [m, n]; op(A) [m, k]; op(B) [k, n]
  MatRef a, b;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;  // C += product (else C = product)
  // The epilogue, fused into the product where the backend offers it
  // (cuBLASLt's BIAS / GELU_BIAS / GELU; the CPU path applies it in one pass
  // after the product): C = act(product [+ C] [+ bias]), bias [n] added to
  // every row, act = GELU (tanh approximation) when gelu is set.
  const float* bias = nullptr;
  bool gelu = false;
  // Strided batch: `batch` products, the i-th on A + i * stride_a, B + i *
  // stride_b, C + i * stride_c (elements), as the per-head products of
  // attention are. No epilogue with batch > 1.
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Product i of a strided batch as a single product (batch 1).
GemmDesc BatchItem(const GemmDesc& g, int64_t i);

// The epilogue of one element of C (the CPU path's; cuBLASLt's own GELU is
// within a few ulp of it).
float GemmEpilogue(const GemmDesc& g, float v, int64_t col);

// The shape of an operand as stored (rows, cols of its row-major storage).
struct StoredShape {
  int64_t rows = 0, cols = 0;
};
StoredShape StoredShapeOf(const MatRef& x, int64_t logical_rows,
                          int64_t logical_cols);

// Positive sizes, non-null operands of dtype fp32 or bf16, ld >= the stored
// row length, ldc >= n, batch >= 1 with non-negative strides and no
// epilogue when batched: INVALID_ARGUMENT naming the operand otherwise.
absl::Status ValidateGemm(const GemmDesc& g);

// The same product in BLAS's column-major terms. A row-major [r, c] matrix
// with row stride ld, read column-major, is its transpose [c, r] with the
// same ld, so C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T
// (column-major): cuBLAS's first operand is B's storage, its second A's, and
// its m and n are swapped.
struct ColumnMajorOperand {
  const void* data = nullptr;
  DType dtype = DType::kFp32;
  bool trans = false;  // CUBLAS_OP_T when set, else CUBLAS_OP_N
  int64_t ld = 0;
  int64_t rows = 0, cols = 0;  // of the stored column-major matrix
};
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // D [m, n] = op(a) [m, k] * op(b) [k, n]
  ColumnMajorOperand a, b;
  float* c = nullptr;
  int64_t ldc = 0;
  float beta = 0;  // 1 when accumulating
  const float* bias = nullptr;  // [m] here: one per column of row-major C
  bool gelu = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // of a, b, c here
};
ColumnMajorGemm ToColumnMajor(const GemmDesc& g);

}  // namespace zeroshard::kernels

#endif  // ZEROSHARD_MODEL_KERNELS_GEMM_DESC_H_
