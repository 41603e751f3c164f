#include "common/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace zeroshard {

double GradSumOfSquares(absl::Span<const float> x) {
  // Eight independent accumulators let the compiler vectorize the
  // float->double widening and break the add dependency chain.
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t n = x.size();
  const float* p = x.data();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const double v = p[i + k];
      acc[k] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = p[i];
    acc[0] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

double GradSumOfSquaresReference(absl::Span<const float> x) {
  double s = 0;
  for (float f : x) s += static_cast<double>(f) * static_cast<double>(f);
  return s;
}

bool AllFinite(absl::Span<const float> x) {
  bool ok = true;
  for (float f : x) ok &= std::isfinite(f);
  return ok;
}

GradCoefficient ComputeGradCoefficient(double total_sumsq, double loss_scale, double max_norm) {
  GradCoefficient c;
  if (!std::isfinite(total_sumsq) || total_sumsq < 0 || !std::isfinite(loss_scale) ||
      !(loss_scale > 0) || !(max_norm >= 0)) {
    c.overflow = true;
    c.norm = std::isfinite(total_sumsq) ? std::sqrt(std::max(total_sumsq, 0.0)) : total_sumsq;
    c.coefficient = 0;
    return c;
  }
  c.norm = std::sqrt(total_sumsq) / loss_scale;
  if (max_norm > 0) c.clip_factor = std::min(1.0, max_norm / (c.norm + kClipEpsilon));
  c.coefficient = c.clip_factor / loss_scale;
  return c;
}

void ScaleGradients(absl::Span<float> x, float coefficient) {
  for (float& f : x) f *= coefficient;
}

}  // namespace zeroshard
