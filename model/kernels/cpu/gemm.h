// Matrix products for the CPU kernels: C (FP32) = op(A) * op(B) [+ C].
//
// Operands are FP32 or BF16, row-major, with a leading dimension and an
// optional transpose; products accumulate in FP32. The fast path runs on
// oneDNN's matmul (Debian libdnnl 2.6), chosen over OpenBLAS by measurement on
// this machine (2-core AMD EPYC with AVX-512-BF16; `zeroshard-bench gemm`):
//   1024x512x2048: oneDNN bf16 ~400 GFLOP/s, oneDNN f32 ~210, OpenBLAS sgemm
//   ~185 (its AVX-512 kernels) and ~50-100 with OPENBLAS_CORETYPE=Haswell.
// Debian's OpenBLAS 0.3.21 does not export cblas_sbgemm, so BF16 products on
// OpenBLAS would need a widening copy; oneDNN reads BF16 natively at twice the
// FP32 rate, so BF16 training runs its matrix products at the BF16 rate.
//
//   GemmDesc g{.m = M, .n = N, .k = K,
//              .a = {x, DType::kBf16, K}, .b = {w, DType::kBf16, N},
//              .c = y, .ldc = N, .accumulate = false};
//   RETURN_IF_ERROR(Gemm(g));            // y[M,N] = x[M,K] * w[K,N]
//
// Contract: when A and B have different dtypes (one FP32, one BF16), the FP32
// operand is rounded to BF16 first (round to nearest even), as mixed-precision
// training does for gradients. Not thread-safe against itself on the same C;
// safe to call from several threads otherwise.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_GEMM_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::kernels::cpu {

// The descriptor is shared with the CUDA path (model/kernels/gemm_desc.h).
using kernels::GemmDesc;
using kernels::MatRef;

// Fast path (oneDNN). Validates shapes, strides and dtypes. BF16 products
// run natively where oneDNN has a BF16 matmul for this CPU (AVX-512); on
// others (AVX2 only) the BF16 operands are widened exactly to FP32 first:
// the same products and FP32 accumulation, at the FP32 rate.
absl::Status Gemm(const GemmDesc& g);

// "native" or "widened": how Gemm runs BF16 products on this CPU.
absl::string_view Bf16GemmPath();
// Tests: run BF16 products through the widening path on any CPU.
void ForceBf16WideningForTesting(bool widen);

// Scalar reference: same contract (including the BF16 rounding of a mixed
// FP32 operand), plain loops with FP32 accumulation in double.
absl::Status GemmReference(const GemmDesc& g);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_GEMM_H_
