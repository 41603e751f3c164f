// The per-element and per-row arithmetic of Llama's ops (RMSNorm, rotary
// embeddings, SwiGLU), written once for the host and a CUDA device
// (common/host_device.h), as element_math.h is for GPT-2's: the CPU fast
// paths and twins (model/kernels/cpu) and the CUDA kernels
// (model/kernels/cuda) call these, so the formulas a device runs are
// tested on every machine.
//
//   float rs = RmsNormRstd(sum_sq, C, eps);  float y = RmsNormElement(x, rs, g);
//   RopePair(a, b, cos, sin, &y1, &y2);
//   float act = SwiGluElement(gate, up);
#ifndef ZEROSHARD_MODEL_KERNELS_LLAMA_MATH_H_
#define ZEROSHARD_MODEL_KERNELS_LLAMA_MATH_H_

#include <math.h>

#include "common/host_device.h"

namespace zeroshard::kernels {

// RMSNorm of one row, given its sum of squares: 1 / sqrt(mean(x^2) + eps).
ZS_HOST_DEVICE inline float RmsNormRstd(float sum_sq, int channels, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(channels) + eps);
}
// y = g * (x * rstd), as Hugging Face's LlamaRMSNorm.
ZS_HOST_DEVICE inline float RmsNormElement(float x, float rstd, float g) {
  return g * (x * rstd);
}
// The term of sum(dy * g * xhat) for one element.
ZS_HOST_DEVICE inline float RmsNormDotTerm(float dy, float x, float rstd, float g) {
  return dy * g * (x * rstd);
}
// dx (to add) given the row's mean of those terms.
ZS_HOST_DEVICE inline float RmsNormBackwardElement(float dy, float x, float rstd,
                                                   float g, float mean_dot) {
  return rstd * (dy * g - (x * rstd) * mean_dot);
}

// One rotated pair: y1 = a cos - b sin, y2 = b cos + a sin (two products
// and a sum, as torch's q * cos + rotate_half(q) * sin); the inverse
// rotation is sin negated.
ZS_HOST_DEVICE inline void RopePair(float a, float b, float c, float s, float* y1,
                                    float* y2) {
  const float ac = a * c, bs = b * s, bc = b * c, as = a * s;
  *y1 = ac - bs;
  *y2 = bc + as;
}

// silu(gate) * up, silu(z) = z / (1 + exp(-z)) (torch's silu).
ZS_HOST_DEVICE inline float SwiGluElement(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}
// Its gradients: d gate = da * up * s (1 + gate (1 - s)), d up = da *
// silu(gate), s = sigmoid(gate) (torch's silu backward).
ZS_HOST_DEVICE inline void SwiGluGradElements(float gate, float up, float da,
                                              float* dgate, float* dup) {
  const float s = 1.0f / (1.0f + expf(-gate));
  *dgate = da * up * (s * (1.0f + gate * (1.0f - s)));
  *dup = da * (gate / (1.0f + expf(-gate)));
}

}  // namespace zeroshard::kernels

#endif  // ZEROSHARD_MODEL_KERNELS_LLAMA_MATH_H_
