// Elementwise ops: GELU (tanh approximation, as GPT-2 and torch's
// gelu(approximate="tanh")) and the residual add. FP32, n elements.
//
//   GeluForward(h, g, n);  GeluBackward(h, dg, dh, n);
//   ResidualForward(x, f, out, n);   // out = x + f
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_ELEMENTWISE_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_ELEMENTWISE_H_

#include <cstdint>

namespace zeroshard::kernels::cpu {

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void GeluForward(const float* x, float* y, int64_t n);
// dx = dy * gelu'(x) (written).
void GeluBackward(const float* x, const float* dy, float* dx, int64_t n);
// The portable loops GeluForward/GeluBackward run where AVX-512 is not
// available (avx512.h); same formulas and error bound.
void GeluForwardScalar(const float* x, float* y, int64_t n);
void GeluBackwardScalar(const float* x, const float* dy, float* dx, int64_t n);
// Scalar references with the library tanh (the fast versions above use a
// vectorisable exp-based tanh, absolute error ~1e-7).
void GeluForwardReference(const float* x, float* y, int64_t n);
void GeluBackwardReference(const float* x, const float* dy, float* dx, int64_t n);
// out = a + b. The backward of a residual add passes the gradient to both
// inputs unchanged, so it has no kernel.
void ResidualForward(const float* a, const float* b, float* out, int64_t n);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_ELEMENTWISE_H_
