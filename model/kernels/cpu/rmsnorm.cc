#include "model/kernels/cpu/rmsnorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {
namespace {

constexpr int kRmsLanes = 16;

absl::Status RmsNormCheck(int64_t m, int64_t c, float eps) {
  if (m <= 0 || c <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rmsnorm: sizes must be positive: m=", m, " c=", c));
  }
  if (!(eps > 0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat("rmsnorm: eps must be positive, got ", eps));
  }
  return absl::OkStatus();
}

// sum_j a[j] * b[j] in kRmsLanes FP32 partial sums, then added in order.
float RmsLaneDot(const float* a, const float* b, int64_t c) {
  float lanes[kRmsLanes] = {};
  int64_t j = 0;
  for (; j + kRmsLanes <= c; j += kRmsLanes) {
    for (int k = 0; k < kRmsLanes; ++k) lanes[k] += a[j + k] * b[j + k];
  }
  for (int k = 0; j < c; ++j, ++k) lanes[k] += a[j] * b[j];
  float sum = 0;
  for (int k = 0; k < kRmsLanes; ++k) sum += lanes[k];
  return sum;
}

}  // namespace

absl::Status RmsNormForward(const float* x, const float* g, int64_t m, int64_t c,
                            float eps, float* y, float* rstd) {
  if (absl::Status s = RmsNormCheck(m, c, eps); !s.ok()) return s;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * c))
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * c;
    float* yi = y + i * c;
    const float rs = 1.0f / std::sqrt(RmsLaneDot(xi, xi, c) / static_cast<float>(c) + eps);
    for (int64_t j = 0; j < c; ++j) yi[j] = g[j] * (xi[j] * rs);
    rstd[i] = rs;
  }
  return absl::OkStatus();
}

absl::Status RmsNormBackward(const float* dy, const float* x, const float* g,
                             const float* rstd, int64_t m, int64_t c, float* dx,
                             float* dg) {
  if (absl::Status s = RmsNormCheck(m, c, 1); !s.ok()) return s;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * c))
  for (int64_t i = 0; i < m; ++i) {
    const float* dyi = dy + i * c;
    const float* xi = x + i * c;
    const float rs = rstd[i];
    // d xhat = dy * g; dx = rs * (d xhat - xhat * mean(d xhat * xhat)).
    float lanes[kRmsLanes] = {};
    int64_t j = 0;
    for (; j + kRmsLanes <= c; j += kRmsLanes) {
      for (int k = 0; k < kRmsLanes; ++k) lanes[k] += dyi[j + k] * g[j + k] * (xi[j + k] * rs);
    }
    for (int k = 0; j < c; ++j, ++k) lanes[k] += dyi[j] * g[j] * (xi[j] * rs);
    float dot = 0;
    for (int k = 0; k < kRmsLanes; ++k) dot += lanes[k];
    const float mean = dot / static_cast<float>(c);
    float* dxi = dx + i * c;
    for (int64_t q = 0; q < c; ++q) {
      const float xhat = xi[q] * rs;
      dxi[q] += rs * (dyi[q] * g[q] - xhat * mean);
    }
  }
  // dg: the rows in order, column by column (deterministic).
  for (int64_t i = 0; i < m; ++i) {
    const float* dyi = dy + i * c;
    const float* xi = x + i * c;
    const float rs = rstd[i];
    for (int64_t j = 0; j < c; ++j) dg[j] += dyi[j] * (xi[j] * rs);
  }
  return absl::OkStatus();
}

absl::Status RmsNormForwardReference(const float* x, const float* g, int64_t m,
                                     int64_t c, float eps, float* y, float* rstd) {
  if (absl::Status s = RmsNormCheck(m, c, eps); !s.ok()) return s;
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * c;
    double sq = 0;
    for (int64_t j = 0; j < c; ++j) sq += static_cast<double>(xi[j]) * xi[j];
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = static_cast<float>(g[j] * (xi[j] * rs));
    rstd[i] = static_cast<float>(rs);
  }
  return absl::OkStatus();
}

absl::Status RmsNormBackwardReference(const float* dy, const float* x,
                                      const float* g, const float* rstd,
                                      int64_t m, int64_t c, float* dx, float* dg) {
  if (absl::Status s = RmsNormCheck(m, c, 1); !s.ok()) return s;
  std::vector<double> dgs(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const double rs = rstd[i];
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      dot += static_cast<double>(dy[i * c + j]) * g[j] * (x[i * c + j] * rs);
    }
    const double mean = dot / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = x[i * c + j] * rs;
      dx[i * c + j] += static_cast<float>(rs * (dy[i * c + j] * static_cast<double>(g[j]) - xhat * mean));
      dgs[j] += dy[i * c + j] * xhat;
    }
  }
  for (int64_t j = 0; j < c; ++j) dg[j] += static_cast<float>(dgs[j]);
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
