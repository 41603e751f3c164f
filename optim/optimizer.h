// The optimizer step on a slice of the flat space: AdamW / Adam with
// torch.optim semantics, reading the gradient once (FP32 or BF16), scaling it
// by a coefficient, and writing master, m, v and the BF16 mirror in one pass.
//
// AdamUpdateReference is the specification; AdamUpdate dispatches at run time
// to an AVX-512 or AVX2 kernel (or the reference) and splits large slices over
// a thread pool in cache-sized tiles. Both give bit-identical results; tests
// compare them, and the reference against golden values from torch.
//
//   AdamStep step = MakeAdamStep(config, /*t=*/1, /*coefficient=*/0.5f);
//   AdamSlice s{.master = w, .exp_avg = m, .exp_avg_sq = v, .mirror = bf16,
//               .n = n};
//   AdamUpdate(step, GradView::Bf16(g), s);
#ifndef ZEROSHARD_OPTIM_OPTIMIZER_H_
#define ZEROSHARD_OPTIM_OPTIMIZER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/optimizer_config.h"
#include "optim/adam_element.h"

namespace zeroshard {

// Per-thread scratch (copies, widened gradients) up to this many floats is
// kept between updates; larger scratch, a whole tensor's, is freed after
// each one, so that threads which come and go (gRPC's) do not each keep a
// large tensor's worth.
inline constexpr size_t kKeptScratchElems = size_t{1} << 22;

// Everything one update needs, precomputed once per step in double precision
// and rounded to float the way torch does for fp32 parameters.
struct AdamStep {
  OptimizerKind kind = OptimizerKind::kAdamW;
  float lr = 0;
  float beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  // 1 - beta1^t and sqrt(1 - beta2^t), as torch computes them.
  double bias_correction1 = 1;
  double bias_correction2_sqrt = 1;
  // Multiplier for every gradient element (1/loss_scale * clip factor).
  float coefficient = 1;

  // The float constants the update applies, in torch's order; MakeAdamStep
  // derives them from the double-precision values above exactly as torch 1.13
  // converts Python scalars for fp32 tensors. Build an AdamStep with
  // MakeAdamStep (or set these too) before calling an update.
  float decay = 1;                    // AdamW: float(1 - lr * weight_decay)
  float one_minus_beta1 = 0;          // float(1 - beta1)
  float one_minus_beta2 = 0;          // float(1 - beta2)
  float bias_correction2_sqrt_f = 1;  // float(sqrt(1 - beta2^t))
  float neg_step_size = 0;            // float(-(lr / (1 - beta1^t)))
  // The step number t (>= 1) and a registered rule's own constants, as its
  // MakeStep packs them (optim/elementwise_rule.h; each rule's file says
  // which is which).
  uint64_t t = 0;
  std::array<float, 6> rule{};
};

// Builds the per-step constants for Adam step t >= 1 (t == 0 is treated as
// t == 1), with lr = LearningRateAt(config, t). The config should have passed
// ValidateOptimizerConfig.
AdamStep MakeAdamStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient);

// The same for one parameter group (common/param_groups.h): its own
// weight_decay in place of config.weight_decay, and lr =
// LearningRateAt(config, t) * lr_scale (double; torch's param_group["lr"]).
// With config.weight_decay and lr_scale 1 it equals the overload above.
AdamStep MakeAdamStep(const OptimizerConfig& config, uint64_t t,
                      float coefficient, double weight_decay,
                      double lr_scale);

// The per-element constants of `step` (adam_element.h), as the reference and
// the device kernel apply them.
AdamElementArgs AdamElementArgsOf(const AdamStep& step);

// A read-only gradient: FP32 or BF16 elements, at any address (the kernels
// load it unaligned).
struct GradView {
  const void* data = nullptr;
  bool bf16 = false;
  static GradView Fp32(const float* p) { return {p, false}; }
  static GradView Bf16(const uint16_t* p) { return {p, true}; }
  // Element i in FP32 (BF16 widened exactly), loaded with memcpy: a plain
  // unaligned load, as received bytes need.
  float At(size_t i) const {
    const char* bytes = static_cast<const char*>(data);
    if (bf16) {
      uint16_t h;
      std::memcpy(&h, bytes + i * sizeof(h), sizeof(h));
      return Bf16ToFloat(h);
    }
    float g;
    std::memcpy(&g, bytes + i * sizeof(g), sizeof(g));
    return g;
  }
};

// The state being updated; all arrays hold n elements. mirror may be null.
struct AdamSlice {
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  uint16_t* mirror = nullptr;  // BF16 copy of master, rounded to nearest even
  size_t n = 0;
};

// The scalar reference: the specification. Per element, with g the gradient
// (BF16 widened exactly to FP32) and fma a fused multiply-add, as torch 1.13's
// single-tensor AdamW / Adam compute it for fp32 parameters on this CPU:
//   g = g * coefficient
//   Adam with weight_decay != 0:  g = fma(p, weight_decay, g)
//   AdamW:                        p = p * decay
//   m = fma(g, 1 - beta1, m * beta1)
//   v = fma((1 - beta2) * g, g, v * beta2)
//   p = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps)
//   mirror = FloatToBf16(p)
// Preconditions (callers validate): every non-null array holds slice.n
// elements and the arrays do not overlap.
void AdamUpdateReference(const AdamStep& step, GradView grad,
                         const AdamSlice& slice);

// Which kernel AdamUpdate uses on this CPU: "avx512", "avx2" or "scalar".
absl::string_view AdamKernelName();

// Threads for the optimizer's pools: ZEROSHARD_OPTIMIZER_THREADS when it is an
// integer in [1, 1024] (anything else is logged and ignored), else the
// hardware concurrency.
int OptimizerThreads();

// The fast path. Slices above a threshold are split over worker threads
// (ZEROSHARD_OPTIMIZER_THREADS, default: the hardware concurrency); when the
// pool is busy with another call, this call runs on the caller's thread.
// ZEROSHARD_OPTIMIZER_KERNEL=scalar|avx2|avx512 forces a kernel (ignored when
// the CPU lacks it). The SIMD kernels apply the reference's operations in the
// same order with the same fused multiply-adds: results are bit-identical to
// AdamUpdateReference, and the mirror to FloatToBf16 (tests check both).
// Same preconditions as AdamUpdateReference; thread-safe.
void AdamUpdate(const AdamStep& step, GradView grad, const AdamSlice& slice);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_OPTIMIZER_H_
