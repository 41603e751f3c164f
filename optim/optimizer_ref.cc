// The scalar reference of the Adam update (the specification) and the
// per-step constants. Compiled with -ffp-contract=off: every fused
// multiply-add is an explicit fmaf (adam_element.h), where torch's kernels fuse.
#include <algorithm>
#include <cmath>

#include "common/dtype.h"
#include "optim/adam_element.h"
#include "optim/optimizer.h"

namespace zeroshard {

AdamStep MakeAdamStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient) {
  return MakeAdamStep(config, t, coefficient, config.weight_decay, 1.0);
}

AdamStep MakeAdamStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient, double weight_decay,
                      double lr_scale) {
  t = std::max<uint64_t>(t, 1);
  // torch: step = step_t.item() (a Python float); beta ** step and the
  // divisions below are double arithmetic; each scalar becomes a float only
  // when an fp32 tensor op consumes it.
  const double step = static_cast<double>(t);
  // A parameter group's lr, as torch holds it in param_group["lr"]: the
  // schedule's value times the group's scale, in double (exact for 1).
  const double lr = LearningRateAt(config, t) * lr_scale;
  AdamStep s;
  s.kind = ArithmeticKind(config.kind);
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config.beta1);
  s.beta2 = static_cast<float>(config.beta2);
  s.eps = static_cast<float>(config.eps);
  s.weight_decay = static_cast<float>(weight_decay);
  s.bias_correction1 = 1.0 - std::pow(config.beta1, step);
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(config.beta2, step));
  s.coefficient = coefficient;
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  s.bias_correction2_sqrt_f = static_cast<float>(s.bias_correction2_sqrt);
  s.neg_step_size = static_cast<float>(-(lr / s.bias_correction1));
  return s;
}

AdamElementArgs AdamElementArgsOf(const AdamStep& step) {
  AdamElementArgs a;
  a.coefficient = step.coefficient;
  a.weight_decay = step.weight_decay;
  a.decay = step.decay;
  a.beta1 = step.beta1;
  a.beta2 = step.beta2;
  a.one_minus_beta1 = step.one_minus_beta1;
  a.one_minus_beta2 = step.one_minus_beta2;
  a.bias_correction2_sqrt = step.bias_correction2_sqrt_f;
  a.eps = step.eps;
  a.neg_step_size = step.neg_step_size;
  a.adamw = step.kind == OptimizerKind::kAdamW;
  a.l2 = !a.adamw && step.weight_decay != 0.0f;
  return a;
}

void AdamUpdateReference(const AdamStep& step, GradView grad,
                         const AdamSlice& slice) {
  const AdamElementArgs a = AdamElementArgsOf(step);
  // Gradients may sit at any address (received bytes, or a SIMD kernel's
  // tail): GradView::At loads each element unaligned.
  for (size_t i = 0; i < slice.n; ++i) {
    AdamElement(a, grad.At(i), slice.master[i], slice.exp_avg[i],
                slice.exp_avg_sq[i]);
    if (slice.mirror != nullptr) slice.mirror[i] = FloatToBf16(slice.master[i]);
  }
}

}  // namespace zeroshard
