// The per-element and per-row arithmetic of the GPT ops, written once for the
// host and a CUDA device (common/host_device.h).
//
// The CUDA kernels (model/kernels/cuda) call these functions per element or
// per row; the CPU twins (model/kernels/cpu/twins.h) call the same functions
// in plain loops, and the tests compare the twins with the CPU references
// (double sums, library tanh) here, and the device kernels with the twins on
// a GPU. So the formulas a device runs are exercised on every machine; what
// only a GPU can check is the reduction order (a block's tree against the
// twin's sequential sum) and the device's tanhf/expf/logf, each within a few
// ulp of glibc's.
//
//   float y = GeluForwardElement(x);
//   float dx = GeluBackwardElement(x, dy);
//   float yn = LayerNormElement(x, mean, rstd, gamma, beta);
#ifndef ZEROSHARD_MODEL_KERNELS_ELEMENT_MATH_H_
#define ZEROSHARD_MODEL_KERNELS_ELEMENT_MATH_H_

#include <math.h>

#include "common/host_device.h"

namespace zeroshard::kernels {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCube = 0.044715f;
inline constexpr float kLayerNormEpsilon = 1e-5f;  // torch's default

// The bias gradient's column sums, dbias[j] += sum over rows i of dy[i, j],
// in one order on every device: rows in chunks of kColumnSumRows, each
// chunk summed in row order from 0, the chunks' sums added to dbias[j] in
// chunk order. The chunks let a GPU run a thread per (column, chunk) rather
// than one per column over every row; the CPU twin sums in the same order,
// so both give the same bits.
inline constexpr int64_t kColumnSumRows = 64;

// GELU, tanh approximation (GPT-2; torch's gelu(approximate="tanh")):
// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
ZS_HOST_DEVICE inline float GeluForwardElement(float x) {
  const float u = kGeluScale * (x + kGeluCube * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// dx = dy * gelu'(x).
ZS_HOST_DEVICE inline float GeluBackwardElement(float x, float dy) {
  const float u = kGeluScale * (x + kGeluCube * x * x * x);
  const float t = tanhf(u);
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

// LayerNorm of one row: given the row's sum and sum of squared deviations
// (computed by the caller's reduction), its mean and 1 / sqrt(var + eps)
// with the biased variance, as torch.
ZS_HOST_DEVICE inline float LayerNormMean(float sum, int channels) {
  return sum / static_cast<float>(channels);
}
ZS_HOST_DEVICE inline float LayerNormRstd(float sum_sq_dev, int channels) {
  return 1.0f / sqrtf(sum_sq_dev / static_cast<float>(channels) +
                      kLayerNormEpsilon);
}
ZS_HOST_DEVICE inline float LayerNormElement(float x, float mean, float rstd,
                                             float gamma, float beta) {
  return (x - mean) * rstd * gamma + beta;
}

// LayerNorm backward of one element: with xhat = (x - mean) * rstd,
// dnorm = dy * gamma and the row means mean(dnorm), mean(dnorm * xhat),
// dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)).
ZS_HOST_DEVICE inline float LayerNormBackwardElement(float dy, float gamma,
                                                     float xhat, float rstd,
                                                     float mean_dnorm,
                                                     float mean_dnorm_xhat) {
  return rstd * (dy * gamma - mean_dnorm - xhat * mean_dnorm_xhat);
}

// Softmax cross-entropy of one row, given its maximum and sum of
// exp(logit - max): the row's loss and one element of its gradient,
// grad_scale * (softmax - onehot) / rows.
ZS_HOST_DEVICE inline float CrossEntropyRowLoss(float max, float sum_exp,
                                                float target_logit) {
  return logf(sum_exp) + max - target_logit;
}
ZS_HOST_DEVICE inline float CrossEntropyGradElement(float logit, float max,
                                                    float sum_exp,
                                                    bool is_target,
                                                    float scale_over_rows) {
  const float p = expf(logit - max) / sum_exp;
  return scale_over_rows * (p - (is_target ? 1.0f : 0.0f));
}

// One term of the gradients' sum of squares, and whether it is finite (the
// global-norm clip and the FP16 overflow check read both from one pass).
ZS_HOST_DEVICE inline double SquareTerm(float g) {
  return static_cast<double>(g) * static_cast<double>(g);
}
ZS_HOST_DEVICE inline bool IsFiniteElement(float g) { return isfinite(g); }

}  // namespace zeroshard::kernels

#endif  // ZEROSHARD_MODEL_KERNELS_ELEMENT_MATH_H_
