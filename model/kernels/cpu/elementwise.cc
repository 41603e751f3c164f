#include "model/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/threading.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels::cpu {
namespace {

// exp(x) for x in [-87, 88] without a library call, so loops over it
// vectorise: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor
// polynomial (relative error < 2e-7), times 2^n built in the exponent bits.
inline float ExpNoCall(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float t = x * 1.44269504f;
  // t + 126.5 > 0, so truncation rounds to nearest without a branch.
  const int n = static_cast<int>(t + 126.5f) - 126;
  const float fn = static_cast<float>(n);
  const float r = (x - fn * 0.693145752f) - fn * 1.42860677e-6f;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error ~1e-7, which is what GELU
// needs (tanh is added to 1 there). |u| is clamped at 20 (tanh = +-1 in FP32).
inline float TanhNoCall(float u) {
  u = std::min(std::max(u, -20.0f), 20.0f);
  return 1.0f - 2.0f / (ExpNoCall(2.0f * u) + 1.0f);
}

}  // namespace

void GeluForwardScalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + TanhNoCall(kGeluScale * (v + kGeluCube * v * v * v)));
  }
}

void GeluBackwardScalar(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCube * v * v * v);
    const float t = TanhNoCall(u);
    const float sech2 = 1.0f - t * t;
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * sech2 * du);
  }
}

void GeluForward(const float* x, float* y, int64_t n) {
  const bool simd = Avx512Available();
  ParallelChunks(n, [&](int64_t b, int64_t e) {
    if (simd) {
      GeluForwardAvx512(x + b, y + b, e - b);
    } else {
      GeluForwardScalar(x + b, y + b, e - b);
    }
  });
}

void GeluBackward(const float* x, const float* dy, float* dx, int64_t n) {
  const bool simd = Avx512Available();
  ParallelChunks(n, [&](int64_t b, int64_t e) {
    if (simd) {
      GeluBackwardAvx512(x + b, dy + b, dx + b, e - b);
    } else {
      GeluBackwardScalar(x + b, dy + b, dx + b, e - b);
    }
  });
}

void GeluForwardReference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(kGeluScale * (v + kGeluCube * v * v * v))));
  }
}

void GeluBackwardReference(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double t = std::tanh(kGeluScale * (v + kGeluCube * v * v * v));
    const double du = kGeluScale * (1.0 + 3.0 * kGeluCube * v * v);
    dx[i] = static_cast<float>(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
  }
}

void ResidualForward(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (ParallelWorth(n))
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace zeroshard::kernels::cpu
