// AVX-512 span kernels behind the CPU ops, chosen at run time.
//
// Each function here processes one contiguous span on the calling thread;
// the public ops (elementwise.h, bf16_convert.h, attention.h) split the work
// over the OpenMP threads and call these only when Avx512Available() says the
// CPU and OS support AVX-512F. Everything else runs the portable scalar loops,
// so the library still runs on baseline x86-64.
//
//   if (Avx512Available()) GeluForwardAvx512(x, y, n); else ...scalar...
//
// Contracts: any n >= 0 (tails handled inside); results match the portable
// scalar paths bit for bit for the BF16 conversions and to ~1e-7 relative for
// the exp-based ops (FMA contraction differs). Calling these on a CPU without
// AVX-512F is undefined (illegal instruction).
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_AVX512_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_AVX512_H_

#include <cstdint>

namespace zeroshard::kernels::cpu {

// True when AVX-512F may be used (CPU flag and OS-enabled ZMM state).
// Setting the environment variable ZS_NO_AVX512=1 forces false.
bool Avx512Available();

// y = gelu_tanh(x); dx = dy * gelu_tanh'(x). Same formulas as elementwise.cc.
void GeluForwardAvx512(const float* x, float* y, int64_t n);
void GeluBackwardAvx512(const float* x, const float* dy, float* dx, int64_t n);

// FP32 -> BF16 round to nearest even (NaN kept quiet), BF16 -> FP32 exact:
// identical to common/dtype.h's FloatToBf16 / Bf16ToFloat.
void FloatToBf16Avx512(const float* in, uint16_t* out, int64_t n);
void Bf16ToFloatAvx512(const uint16_t* in, float* out, int64_t n);

// SwiGLU on n elements of one row: out = silu(gate) * up, and its
// gradients dgate, dup from da (swiglu.h), with Exp16's exp (~1e-7
// relative of expf).
void SwiGluForwardAvx512(const float* gate, const float* up, float* out, int64_t n);
void SwiGluBackwardAvx512(const float* gate, const float* up, const float* da,
                          float* dgate, float* dup, int64_t n);

// Causal softmax of one score row in place: row[j] = exp(row[j] * scale - max)
// for j < n, returns the sum of those values (max over row[0..n) * scale).
float ScaledExpRowAvx512(float* row, int64_t n, float scale);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_AVX512_H_
