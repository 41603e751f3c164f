#include "model/kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/layernorm_avx512.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {
namespace {

absl::Status CheckSizes(int64_t m, int64_t c) {
  if (m <= 0 || c <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layernorm: sizes must be positive: m=", m, " c=", c));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LayerNormForwardReference(const float* x, const float* gamma,
                              const float* beta, int64_t m, int64_t c, float* y,
                              float* mean, float* rstd) {
  if (absl::Status s = CheckSizes(m, c); !s.ok()) return s;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * c))
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * c;
    float* yi = y + i * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xi[j];
    const float mu = static_cast<float>(sum / c);
    double var = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double d = xi[j] - mu;
      var += d * d;
    }
    const float rs = 1.0f / std::sqrt(static_cast<float>(var / c) + kLayerNormEps);
    for (int64_t j = 0; j < c; ++j) {
      yi[j] = (xi[j] - mu) * rs * gamma[j] + beta[j];
    }
    mean[i] = mu;
    rstd[i] = rs;
  }
  return absl::OkStatus();
}

absl::Status LayerNormBackwardReference(const float* dy, const float* x,
                               const float* gamma, const float* mean,
                               const float* rstd, int64_t m, int64_t c,
                               float* dx, float* dgamma, float* dbeta) {
  if (absl::Status s = CheckSizes(m, c); !s.ok()) return s;
  // Rows are independent for dx; dgamma/dbeta sums run serially to stay
  // deterministic (same result for any thread count).
#pragma omp parallel for schedule(static) if (ParallelWorth(m * c))
  for (int64_t i = 0; i < m; ++i) {
    const float* dyi = dy + i * c;
    const float* xi = x + i * c;
    float* dxi = dx + i * c;
    const float mu = mean[i], rs = rstd[i];
    double dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t j = 0; j < c; ++j) {
      const float norm = (xi[j] - mu) * rs;
      const float dnorm = gamma[j] * dyi[j];
      dnorm_mean += dnorm;
      dnorm_norm_mean += static_cast<double>(dnorm) * norm;
    }
    const float a = static_cast<float>(dnorm_mean / c);
    const float b = static_cast<float>(dnorm_norm_mean / c);
    for (int64_t j = 0; j < c; ++j) {
      const float norm = (xi[j] - mu) * rs;
      const float dnorm = gamma[j] * dyi[j];
      dxi[j] += (dnorm - a - norm * b) * rs;
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* dyi = dy + i * c;
    const float* xi = x + i * c;
    const float mu = mean[i], rs = rstd[i];
    for (int64_t j = 0; j < c; ++j) {
      dgamma[j] += (xi[j] - mu) * rs * dyi[j];
      dbeta[j] += dyi[j];
    }
  }
  return absl::OkStatus();
}

absl::Status LayerNormForward(const float* x, const float* gamma,
                              const float* beta, int64_t m, int64_t c, float* y,
                              float* mean, float* rstd) {
  if (!Avx512Available()) {
    return LayerNormForwardReference(x, gamma, beta, m, c, y, mean, rstd);
  }
  if (absl::Status s = CheckSizes(m, c); !s.ok()) return s;
  // Row blocks of 8 over the threads; each row is computed the same way
  // whatever the split, so results do not depend on the thread count.
  constexpr int64_t kRows = 8;
  const int64_t blocks = (m + kRows - 1) / kRows;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * c))
  for (int64_t bl = 0; bl < blocks; ++bl) {
    const int64_t r0 = bl * kRows, rn = std::min(kRows, m - r0);
    LayerNormRowsForwardAvx512(x + r0 * c, gamma, beta, rn, c, y + r0 * c,
                               mean + r0, rstd + r0);
  }
  return absl::OkStatus();
}

absl::Status LayerNormBackward(const float* dy, const float* x,
                               const float* gamma, const float* mean,
                               const float* rstd, int64_t m, int64_t c,
                               float* dx, float* dgamma, float* dbeta) {
  if (!Avx512Available()) {
    return LayerNormBackwardReference(dy, x, gamma, mean, rstd, m, c, dx,
                                      dgamma, dbeta);
  }
  if (absl::Status s = CheckSizes(m, c); !s.ok()) return s;
  constexpr int64_t kRows = 8;
  const int64_t row_blocks = (m + kRows - 1) / kRows;
  // Column blocks of 64 for dgamma/dbeta: every column sums its rows in order
  // 0..m-1 on one thread, so the sums are deterministic.
  constexpr int64_t kCols = 64;
  const int64_t col_blocks = (c + kCols - 1) / kCols;
#pragma omp parallel if (ParallelWorth(m * c))
  {
#pragma omp for schedule(static) nowait
    for (int64_t bl = 0; bl < row_blocks; ++bl) {
      const int64_t r0 = bl * kRows, rn = std::min(kRows, m - r0);
      LayerNormRowsBackwardDxAvx512(dy + r0 * c, x + r0 * c, gamma, mean + r0,
                                    rstd + r0, rn, c, dx + r0 * c);
    }
#pragma omp for schedule(static)
    for (int64_t bl = 0; bl < col_blocks; ++bl) {
      const int64_t c0 = bl * kCols, cn = std::min(kCols, c - c0);
      LayerNormParamGradsAvx512(dy + c0, x + c0, mean, rstd, m, c, cn,
                                dgamma + c0, dbeta + c0);
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
