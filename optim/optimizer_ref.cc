// The scalar reference of the Adam update (the specification) and the
// per-step constants. Compiled with -ffp-contract=off: every fused
// multiply-add here is an explicit std::fma, where torch's kernels fuse.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"
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
  s.kind = config.kind;
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

void AdamUpdateReference(const AdamStep& step, GradView grad,
                         const AdamSlice& slice) {
  const bool adamw = step.kind == OptimizerKind::kAdamW;
  // torch's Adam skips the L2 term entirely when weight_decay == 0 (adding
  // 0 * p would turn a -0 gradient into +0 and an infinite p into NaN).
  const bool l2 = !adamw && step.weight_decay != 0.0f;
  // Gradients may sit at any address (received bytes, or a SIMD kernel's
  // tail): each element is loaded with memcpy, a plain unaligned load.
  const char* gbytes = static_cast<const char*>(grad.data);
  for (size_t i = 0; i < slice.n; ++i) {
    float g;
    if (grad.bf16) {
      uint16_t h;
      std::memcpy(&h, gbytes + i * sizeof(h), sizeof(h));
      g = Bf16ToFloat(h);
    } else {
      std::memcpy(&g, gbytes + i * sizeof(g), sizeof(g));
    }
    g = g * step.coefficient;
    float p = slice.master[i];
    if (l2) g = std::fma(p, step.weight_decay, g);   // grad.add(param, alpha)
    if (adamw) p = p * step.decay;                   // param.mul_(1 - lr*wd)
    const float m = std::fma(g, step.one_minus_beta1,
                             slice.exp_avg[i] * step.beta1);
    const float v = std::fma(step.one_minus_beta2 * g, g,
                             slice.exp_avg_sq[i] * step.beta2);
    const float denom = std::sqrt(v) / step.bias_correction2_sqrt_f + step.eps;
    p = p + (step.neg_step_size * m) / denom;        // addcdiv_
    slice.master[i] = p;
    slice.exp_avg[i] = m;
    slice.exp_avg_sq[i] = v;
    if (slice.mirror != nullptr) slice.mirror[i] = FloatToBf16(p);
  }
}

}  // namespace zeroshard
