#include "model/kernels/cpu/swiglu.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/threading.h"
#include "model/kernels/llama_math.h"

namespace zeroshard::kernels::cpu {
namespace {

absl::Status SwiGluCheck(int64_t m, int64_t f) {
  if (m <= 0 || f <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("swiglu: sizes must be positive: m=", m, " f=", f));
  }
  return absl::OkStatus();
}

template <typename Real>
Real SwiGluSigmoid(Real z) {
  return Real{1} / (Real{1} + std::exp(-z));
}

template <typename Real>
void SwiGluRows(const float* gu, int64_t m, int64_t f, float* a) {
#pragma omp parallel for schedule(static) if (ParallelWorth(m * f))
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu + i * 2 * f;
    const float* u = g + f;
    for (int64_t j = 0; j < f; ++j) {
      const Real z = g[j];
      a[i * f + j] = static_cast<float>(z / (Real{1} + std::exp(-z)) * Real{u[j]});
    }
  }
}

template <typename Real>
void SwiGluGradRows(const float* gu, const float* da, int64_t m, int64_t f, float* dgu) {
#pragma omp parallel for schedule(static) if (ParallelWorth(m * f))
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu + i * 2 * f;
    const float* u = g + f;
    float* dg = dgu + i * 2 * f;
    float* du = dg + f;
    for (int64_t j = 0; j < f; ++j) {
      const Real z = g[j];
      const Real s = SwiGluSigmoid(z);
      const Real d = da[i * f + j];
      dg[j] = static_cast<float>(d * Real{u[j]} * (s * (Real{1} + z * (Real{1} - s))));
      du[j] = static_cast<float>(d * (z / (Real{1} + std::exp(-z))));
    }
  }
}

}  // namespace

absl::Status SwiGluForward(const float* gu, int64_t m, int64_t f, float* a) {
  if (absl::Status s = SwiGluCheck(m, f); !s.ok()) return s;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * f))
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu + i * 2 * f;
    if (Avx512Available()) {
      SwiGluForwardAvx512(g, g + f, a + i * f, f);
      continue;
    }
    for (int64_t j = 0; j < f; ++j) a[i * f + j] = SwiGluElement(g[j], g[f + j]);
  }
  return absl::OkStatus();
}

absl::Status SwiGluForwardTwin(const float* gu, int64_t m, int64_t f, float* a) {
  if (absl::Status s = SwiGluCheck(m, f); !s.ok()) return s;
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu + i * 2 * f;
    for (int64_t j = 0; j < f; ++j) a[i * f + j] = SwiGluElement(g[j], g[f + j]);
  }
  return absl::OkStatus();
}

absl::Status SwiGluBackward(const float* gu, const float* da, int64_t m, int64_t f,
                            float* dgu) {
  if (absl::Status s = SwiGluCheck(m, f); !s.ok()) return s;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * f))
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu + i * 2 * f;
    float* d = dgu + i * 2 * f;
    if (Avx512Available()) {
      SwiGluBackwardAvx512(g, g + f, da + i * f, d, d + f, f);
      continue;
    }
    for (int64_t j = 0; j < f; ++j) {
      SwiGluGradElements(g[j], g[f + j], da[i * f + j], &d[j], &d[f + j]);
    }
  }
  return absl::OkStatus();
}

absl::Status SwiGluBackwardTwin(const float* gu, const float* da, int64_t m, int64_t f,
                                float* dgu) {
  if (absl::Status s = SwiGluCheck(m, f); !s.ok()) return s;
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu + i * 2 * f;
    float* d = dgu + i * 2 * f;
    for (int64_t j = 0; j < f; ++j) {
      SwiGluGradElements(g[j], g[f + j], da[i * f + j], &d[j], &d[f + j]);
    }
  }
  return absl::OkStatus();
}

absl::Status SwiGluForwardReference(const float* gu, int64_t m, int64_t f, float* a) {
  if (absl::Status s = SwiGluCheck(m, f); !s.ok()) return s;
  SwiGluRows<double>(gu, m, f, a);
  return absl::OkStatus();
}

absl::Status SwiGluBackwardReference(const float* gu, const float* da, int64_t m,
                                     int64_t f, float* dgu) {
  if (absl::Status s = SwiGluCheck(m, f); !s.ok()) return s;
  SwiGluGradRows<double>(gu, da, m, f, dgu);
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
