// The quintic Newton–Schulz iteration of Muon (Keller Jordan 2024, "Muon:
// An optimizer for hidden layers in neural networks"): an approximate
// orthogonalization of a matrix G, X ~ U V^T for G = U S V^T, as the
// published zeropower_via_newtonschulz5 computes it (here in FP32):
//   X = G / (||G||_F + 1e-7), transposed first when rows > cols
//   5 times: A = X X^T;  B = b A + c A A;  X = a X + B X
//   with (a, b, c) = (3.4445, -4.7750, 2.0315); transposed back.
// NewtonSchulz5 runs the products on oneDNN's FP32 matmul, the library the
// worker's products use (`zeroshard-bench gemm` on 2-core AMD EPYC and
// Intel Xeon machines: FP32 products 1.1 to 4.7 times as fast as OpenBLAS's
// sgemm);
// NewtonSchulz5Reference is the same iteration with plain loops (FP32
// operands, sums in double), which the tests compare it with.
//
// NsPrecision::kBf16 is the published code's BF16 arithmetic as a GPU
// runs it: X in BF16 from the start (G rounded before its norm), and every
// operation computed in FP32 from BF16 inputs and rounded once to BF16 —
// the norm, each scaling and sum (the constants in FP32, as CUDA kernels
// take a Python scalar), and each product (FP32 sums of BF16 products, as
// cuBLAS makes them). The products run on oneDNN's BF16 matmul (hardware
// BF16 where the CPU has it), the reference's in double. The result is
// BF16-valued.
//
//   NewtonSchulzScratch scratch;
//   RETURN_IF_ERROR(NewtonSchulz5(g, rows, cols, out, scratch));
#ifndef ZEROSHARD_OPTIM_NEWTON_SCHULZ_H_
#define ZEROSHARD_OPTIM_NEWTON_SCHULZ_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace zeroshard {

inline constexpr int kNewtonSchulzSteps = 5;
inline constexpr float kNewtonSchulzA = 3.4445f;
inline constexpr float kNewtonSchulzB = -4.7750f;
inline constexpr float kNewtonSchulzC = 2.0315f;

enum class NsPrecision { kFp32 = 0, kBf16 = 1 };

// Reused buffers (X, A, B and a copy of X; BF16 operands): one per thread.
struct NewtonSchulzScratch {
  std::vector<float> x, a, b, y;
  std::vector<uint16_t> h0, h1;
};

// out (rows x cols, row-major) = the iteration on g (the same shape).
// INVALID_ARGUMENT for a dimension < 1 or a null array; g and out may be
// the same array.
absl::Status NewtonSchulz5(const float* g, int64_t rows, int64_t cols,
                           float* out, NewtonSchulzScratch& scratch,
                           NsPrecision precision = NsPrecision::kFp32);

absl::Status NewtonSchulz5Reference(const float* g, int64_t rows,
                                    int64_t cols, float* out,
                                    NsPrecision precision = NsPrecision::kFp32);

// Floating-point operations of one call: per step 2 s^2 l (A) + 2 s^3 (A A)
// + 2 s^2 l (B X), s = min(rows, cols), l = max(rows, cols).
double NewtonSchulzFlops(int64_t rows, int64_t cols);

// C (m x n, row-major) = A (m x k) op(B), op(B) = B (k x n) or, with bt,
// B^T (B stored n x k): the products NewtonSchulz5 runs (oneDNN, FP32).
// INTERNAL when oneDNN fails.
absl::Status Fp32MatMul(const float* a, const float* b, bool bt, int64_t m,
                        int64_t n, int64_t k, float* c);
// The same with BF16 operands (bit patterns) and an FP32 result: the
// products of NsPrecision::kBf16. Where oneDNN has no BF16 matmul (below
// AVX-512), Fp32MatMul on the widened operands.
absl::Status Bf16MatMul(const uint16_t* a, const uint16_t* b, bool bt,
                        int64_t m, int64_t n, int64_t k, float* c);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_NEWTON_SCHULZ_H_
