// Gradient checks: a non-finite flag and the sum of squares, for the global
// norm / overflow agreement of a step (DESIGN.md "Agree, then commit").
//
//   GradStats s = ComputeGradStats(grad.data(), grad.size());
//   if (!s.finite) { /* fp16 overflow: skip the step, back off the scale */ }
#ifndef ZEROSHARD_WORKER_KERNELS_CPU_GRAD_CHECK_H_
#define ZEROSHARD_WORKER_KERNELS_CPU_GRAD_CHECK_H_

#include <cstddef>

namespace zeroshard::kernels::cpu {

struct GradStats {
  double sum_sq = 0;    // sum of squares of the finite elements
  bool finite = true;   // false when any element is NaN or +-Inf
};

// True when every element is finite.
bool AllFinite(const float* x, size_t n);

// Sum of squares (double accumulation, deterministic) and the finite flag.
GradStats ComputeGradStats(const float* x, size_t n);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_WORKER_KERNELS_CPU_GRAD_CHECK_H_
