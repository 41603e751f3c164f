// RMSNorm over the last dimension (Llama's, as Hugging Face's
// LlamaRMSNorm computes it in FP32): y = g * (x * rstd), rstd = 1 /
// sqrt(mean(x^2) + eps).
//
//   RmsNormForward(x, g, M, C, eps, y, rstd);
//   RmsNormBackward(dy, x, g, rstd, M, C, dx, dg);
//
// All FP32. rstd [M] is saved by the forward for the backward. dx is
// ACCUMULATED (+=): in a pre-norm block it adds into the residual stream's
// gradient; dg is accumulated. The fast path sums each row in sixteen FP32
// lanes (a loop the compiler vectorizes; the same bits for any thread
// count); the *Reference functions sum in double.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_RMSNORM_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_RMSNORM_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

absl::Status RmsNormForward(const float* x, const float* g, int64_t m, int64_t c,
                            float eps, float* y, float* rstd);
absl::Status RmsNormBackward(const float* dy, const float* x, const float* g,
                             const float* rstd, int64_t m, int64_t c, float* dx,
                             float* dg);

absl::Status RmsNormForwardReference(const float* x, const float* g, int64_t m,
                                     int64_t c, float eps, float* y, float* rstd);
absl::Status RmsNormBackwardReference(const float* dy, const float* x,
                                      const float* g, const float* rstd,
                                      int64_t m, int64_t c, float* dx, float* dg);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_RMSNORM_H_
