// The Adam / AdamW update of one element, for the host and a CUDA device.
//
// AdamUpdateReference (optimizer.h: the specification, equal to torch 1.13's
// single-tensor AdamW bit for bit) runs this function per element, and so
// does the device kernel (adam_device_kernel.cu), so the two apply the same
// operations in the same order. They agree bit for bit when neither compiler
// contracts a product and a sum into a fused multiply-add on its own: the
// host sources of optim/ build with -ffp-contract=off, the device kernel with
// nvcc --fmad=false. The only fused multiply-adds are the explicit fmaf
// calls (torch's), sqrtf and the divisions are IEEE (correctly rounded) on
// both sides.
//
//   AdamElementArgs a = AdamElementArgsOf(step);      // optimizer.h
//   for (i...) AdamElement(a, grad[i], master[i], exp_avg[i], exp_avg_sq[i]);
#ifndef ZEROSHARD_OPTIM_ADAM_ELEMENT_H_
#define ZEROSHARD_OPTIM_ADAM_ELEMENT_H_

#include <math.h>

#include "common/host_device.h"

namespace zeroshard {

// The float constants of one step for one parameter group (AdamStep's, with
// the optimizer kind resolved into two flags). Plain data: it is passed to a
// device kernel by value.
struct AdamElementArgs {
  float coefficient = 1;   // 1 / loss_scale * clip factor
  float weight_decay = 0;  // Adam's L2 term (used only when l2)
  float decay = 1;         // AdamW: float(1 - lr * weight_decay)
  float beta1 = 0, beta2 = 0;
  float one_minus_beta1 = 0, one_minus_beta2 = 0;
  float bias_correction2_sqrt = 1;  // float(sqrt(1 - beta2^t))
  float eps = 0;
  float neg_step_size = 0;  // float(-(lr / (1 - beta1^t)))
  bool adamw = true;        // decoupled decay: p *= decay
  // Adam with weight_decay != 0: g = fma(p, weight_decay, g). torch skips the
  // term when weight_decay == 0 (0 * p would turn -0 into +0, Inf into NaN).
  bool l2 = false;
};

// g is the raw gradient element (BF16 already widened); p, m, v are updated in
// place.
ZS_HOST_DEVICE inline void AdamElement(const AdamElementArgs& a, float g,
                                       float& p, float& m, float& v) {
  g = g * a.coefficient;
  if (a.l2) g = fmaf(p, a.weight_decay, g);  // grad.add(param, alpha)
  if (a.adamw) p = p * a.decay;              // param.mul_(1 - lr * wd)
  m = fmaf(g, a.one_minus_beta1, m * a.beta1);
  v = fmaf(a.one_minus_beta2 * g, g, v * a.beta2);
  const float denom = sqrtf(v) / a.bias_correction2_sqrt + a.eps;
  p = p + (a.neg_step_size * m) / denom;     // addcdiv_
}

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAM_ELEMENT_H_
