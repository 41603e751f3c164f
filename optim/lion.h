// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// the sign of an interpolation of momentum and gradient, with decoupled
// weight decay applied first, and one state slot, exp_avg (m).
//
// LionUpdateReference is the specification, per element, as torch 1.13
// computes the published update for FP32 tensors
//   p.mul_(1 - lr * wd)
//   update = m.clone().mul_(beta1).add(g, alpha=1 - beta1).sign_()
//   p.add_(update, alpha=-lr)
//   m.mul_(beta2).add_(g, alpha=1 - beta2)
// that is, with the scalars rounded to float and fma a fused multiply-add:
//   g = g * coefficient
//   p = p * decay                                     (decay = 1 - lr * wd)
//   c = fma(g, 1 - beta1, m * beta1)
//   p = fma(sign(c), -lr, p)                          (sign(0) = 0)
//   m = fma(g, 1 - beta2, m * beta2)
//   mirror = FloatToBf16(p)
// LionUpdate runs an AVX-512 kernel where the CPU has it (the same
// operations in the same order: bit-identical; tests compare them) and
// splits large slices over the optimizer pool.
//
//   AdamStep step = MakeLionStep(config, t, coefficient, wd, lr_scale);
//   LionUpdate(step, GradView::Bf16(g), {.master = w, .exp_avg = m,
//                                         .mirror = bf16, .n = n});
#ifndef ZEROSHARD_OPTIM_LION_H_
#define ZEROSHARD_OPTIM_LION_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "common/optimizer_config.h"
#include "optim/optimizer.h"

namespace zeroshard {

// Lion's per-step constants, in the fields of AdamStep that it shares:
// lr, beta1, beta2, weight_decay, coefficient, decay = float(1 - lr * wd),
// one_minus_beta1, one_minus_beta2, and neg_step_size = float(-lr). Lion has
// no bias correction and no eps.
AdamStep MakeLionStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient, double weight_decay,
                      double lr_scale);

struct LionSlice {
  float* master = nullptr;
  float* exp_avg = nullptr;
  uint16_t* mirror = nullptr;  // may be null
  size_t n = 0;
};

// The specification (see above). Preconditions: the arrays hold n elements
// and do not overlap.
void LionUpdateReference(const AdamStep& step, GradView grad,
                         const LionSlice& slice);

// The AVX-512 kernel on the calling thread; call only where the CPU has
// AVX-512 F and BW (LionKernelName() says "avx512").
void LionUpdateAvx512(const AdamStep& step, GradView grad,
                      const LionSlice& slice);

// "avx512" or "scalar": what LionUpdate uses here (ZEROSHARD_OPTIMIZER_KERNEL
// =scalar forces the reference, as for AdamW).
absl::string_view LionKernelName();

// The fast path; thread-safe, same preconditions as the reference.
void LionUpdate(const AdamStep& step, GradView grad, const LionSlice& slice);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_LION_H_
