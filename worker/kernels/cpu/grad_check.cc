#include "worker/kernels/cpu/grad_check.h"

#include <cmath>

namespace zeroshard::kernels::cpu {

bool AllFinite(const float* x, size_t n) {
  // Branch-free: an Inf or NaN makes v - v NaN, which fails v - v == 0.
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok &= (x[i] - x[i] == 0.0f);
  return ok;
}

GradStats ComputeGradStats(const float* x, size_t n) {
  GradStats s;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (std::isfinite(v)) {
      s.sum_sq += static_cast<double>(v) * v;
    } else {
      s.finite = false;
    }
  }
  return s;
}

}  // namespace zeroshard::kernels::cpu
