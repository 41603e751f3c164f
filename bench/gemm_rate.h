// The large-GEMM rate of the matrix-product path the GPT worker uses
// (model/kernels/cpu/gemm.h: oneDNN, BF16 operands, FP32 accumulation), so
// a step benchmark can state its achieved FLOP/s as a fraction of it.
//
//   const double peak = zeroshard::bench::MeasureBlasGemmFlops();  // FLOP/s
//   printf("step achieves %.2f of the GEMM rate\n", step_flops / peak);
#ifndef ZEROSHARD_BENCH_GEMM_RATE_H_
#define ZEROSHARD_BENCH_GEMM_RATE_H_

#include <cstdint>

#include "common/dtype.h"

namespace zeroshard::bench {

// FLOP/s (2*m*n*k per product) of kernels::cpu::Gemm on [m,k] x [k,n] with
// operands of `dtype` (kBf16 or kFp32): the best of `reps` timed runs after a
// warm-up. Returns 0 when the product fails.
double MeasureGemmFlops(int64_t m, int64_t n, int64_t k, DType dtype, int reps);

// The reference rate for step benchmarks: BF16 2048 x 1024 x 2048 products,
// best of 5.
double MeasureBlasGemmFlops();

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_GEMM_RATE_H_
