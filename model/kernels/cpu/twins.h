// The CPU twins of the CUDA kernels (model/kernels/cuda): each runs the
// device kernel's per-element and per-row functions (model/kernels/
// element_math.h) in plain loops on the host, with the same signatures as
// the CPU ops (cpu_kernels.h) and the same validation.
//
// They are not the training path (the CPU ops are faster); they exist so
// that the device's arithmetic is tested on every machine
// (tests/model/kernels_twin_test.cc: twin against the CPU references) and
// so that the device tests have an oracle computing the same formulas
// (tests/model/kernels_cuda_test.cc: device against twin). Row sums
// accumulate in double, rounded to float before the row functions take them,
// as the device's float tree sums approximate.
//
//   RETURN_IF_ERROR(LayerNormForwardTwin(x, gamma, beta, M, C, y, mean, rstd));
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_TWINS_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_TWINS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

void GeluForwardTwin(const float* x, float* y, int64_t n);
void GeluBackwardTwin(const float* x, const float* dy, float* dx, int64_t n);

// As LayerNormForward / LayerNormBackward (layernorm.h): dx, dgamma, dbeta
// accumulated.
absl::Status LayerNormForwardTwin(const float* x, const float* gamma,
                                  const float* beta, int64_t m, int64_t c,
                                  float* y, float* mean, float* rstd);
absl::Status LayerNormBackwardTwin(const float* dy, const float* x,
                                   const float* gamma, const float* mean,
                                   const float* rstd, int64_t m, int64_t c,
                                   float* dx, float* dgamma, float* dbeta);

// As RmsNormForward / RmsNormBackward (rmsnorm.h; llama_math.h's
// elements): dx and dg accumulated; dg summed per channel over the rows in
// order in FP32, then added, as the device's one thread per channel does.
absl::Status RmsNormForwardTwin(const float* x, const float* g, int64_t m, int64_t c,
                                float eps, float* y, float* rstd);
absl::Status RmsNormBackwardTwin(const float* dy, const float* x, const float* g,
                                 const float* rstd, int64_t m, int64_t c, float* dx,
                                 float* dg);
// (SwiGLU's twins are SwiGluForwardTwin / SwiGluBackwardTwin, swiglu.h; the
// rotary embedding's and the grouped heads' CPU paths run the device's
// element functions and order already: they are their own twins.)

// As SoftmaxCrossEntropy (cross_entropy.h).
absl::Status SoftmaxCrossEntropyTwin(const float* logits,
                                     const int32_t* targets, int64_t m,
                                     int64_t vocab, float grad_scale,
                                     double* loss, float* dlogits);

// The sum of squares (double) of n gradients and how many are not finite.
void GradNormTermsTwin(const float* g, int64_t n, double* sum_sq,
                       int64_t* non_finite);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_TWINS_H_
