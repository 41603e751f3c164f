// Global-norm gradient clipping fused with loss-scale removal, as one
// coefficient applied to the (scaled) gradients before the optimizer step.
//
// Each worker sums the squares of its scaled FP32 gradient shard, the sums
// are all-reduced, and every worker then computes the same coefficient:
//
//   double partial = GradSumOfSquares(my_grad_shard);        // per worker
//   double total = AllReduceSum(partial);                    // collective
//   GradCoefficient c = ComputeGradCoefficient(total, loss_scale, max_norm);
//   if (c.overflow) skip the step (and tell the LossScaler);
//   else ScaleGradients(my_grad_shard, c.coefficient);       // or fuse into Adam
//
// Semantics (torch.nn.utils.clip_grad_norm_ with norm_type 2):
//   norm        = sqrt(total_sumsq_of_scaled_grads) / loss_scale   (unscaled)
//   clip_factor = max_norm > 0 ? min(1, max_norm / (norm + 1e-6)) : 1
//   coefficient = clip_factor / loss_scale
// A non-finite sum (any NaN/Inf gradient anywhere: squares are >= 0, so the
// all-reduced sum carries it) is an overflow. Sums accumulate in double, so
// the sum of squares of finite floats cannot overflow.
#ifndef ZEROSHARD_COMMON_GRAD_CLIP_H_
#define ZEROSHARD_COMMON_GRAD_CLIP_H_

#include <cstdint>

#include "absl/types/span.h"

namespace zeroshard {

// torch's clip_grad_norm_ epsilon.
inline constexpr double kClipEpsilon = 1e-6;

// Sum of x[i]^2 in double precision (several accumulators; the order of
// additions is fixed, so the result is deterministic). NaN/Inf in x make the
// result non-finite.
double GradSumOfSquares(absl::Span<const float> x);

// Plain one-accumulator reference of GradSumOfSquares (tests).
double GradSumOfSquaresReference(absl::Span<const float> x);

// True when every element is finite.
bool AllFinite(absl::Span<const float> x);

struct GradCoefficient {
  bool overflow = false;    // the sum was non-finite: skip the step
  double norm = 0;          // global L2 norm of the unscaled gradients
  double clip_factor = 1;   // min(1, max_norm / (norm + 1e-6)), or 1
  double coefficient = 1;   // clip_factor / loss_scale (0 on overflow)
};

// `total_sumsq`: the global sum of squares of the SCALED gradients;
// `loss_scale` > 0; `max_norm` >= 0 (0 = no clipping). Invalid arguments
// (loss_scale <= 0 or non-finite, max_norm < 0 or NaN) yield an overflow
// result, which skips the step rather than corrupting weights.
GradCoefficient ComputeGradCoefficient(double total_sumsq, double loss_scale, double max_norm);

// x[i] *= coefficient.
void ScaleGradients(absl::Span<float> x, float coefficient);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_GRAD_CLIP_H_
