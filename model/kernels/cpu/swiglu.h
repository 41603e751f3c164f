// SwiGLU, Llama's MLP activation (Shazeer 2020): from the gate and up
// projections side by side, gu [M, 2F] = [gate | up],
//   a = silu(gate) * up,   silu(z) = z / (1 + exp(-z))   (torch's silu)
// and its backward, with torch's silu derivative
//   d gate = da * up * s (1 + gate (1 - s)),  d up = da * silu(gate),
// s = sigmoid(gate).
//
//   RETURN_IF_ERROR(SwiGluForward(gu, M, F, a));
//   RETURN_IF_ERROR(SwiGluBackward(gu, da, M, F, dgu));
//
// FP32; dgu [M, 2F] is written. The fast path runs AVX-512 rows with a
// polynomial exp (avx512.h) where the CPU has it, else model/kernels/
// llama_math.h's element functions; the *Twin functions always run those
// (expf), as the CUDA kernel does; the *Reference functions compute in
// double.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_SWIGLU_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_SWIGLU_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

absl::Status SwiGluForward(const float* gu, int64_t m, int64_t f, float* a);
absl::Status SwiGluBackward(const float* gu, const float* da, int64_t m, int64_t f,
                            float* dgu);

absl::Status SwiGluForwardTwin(const float* gu, int64_t m, int64_t f, float* a);
absl::Status SwiGluBackwardTwin(const float* gu, const float* da, int64_t m, int64_t f,
                                float* dgu);

absl::Status SwiGluForwardReference(const float* gu, int64_t m, int64_t f, float* a);
absl::Status SwiGluBackwardReference(const float* gu, const float* da, int64_t m,
                                     int64_t f, float* dgu);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_SWIGLU_H_
