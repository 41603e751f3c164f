#include "model/kernels/cpu/rope.h"

#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/threading.h"
#include "model/kernels/llama_math.h"

namespace zeroshard::kernels::cpu {
namespace {

absl::Status RopeCheck(const RopeTable& t, int64_t m, int64_t heads, int64_t stride) {
  if (t.seq < 1 || t.head_dim < 2 || t.cos.size() != static_cast<size_t>(t.seq * t.head_dim / 2)) {
    return absl::InvalidArgumentError("rope: the table is not made");
  }
  if (m <= 0 || m % t.seq != 0 || heads <= 0 || stride < heads * t.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope: ", m, " rows (a multiple of seq ", t.seq, ") of ", heads,
        " heads of ", t.head_dim, " in rows of ", stride));
  }
  return absl::OkStatus();
}

// Rotates every head of x's rows by +angle (sign 1) or -angle (sign -1).
template <typename Real>
void RopeRotate(const RopeTable& t, float* x, int64_t m, int64_t heads, int64_t stride,
                bool inverse) {
  const int64_t half = t.head_dim / 2;
#pragma omp parallel for schedule(static) if (ParallelWorth(m * heads * t.head_dim))
  for (int64_t r = 0; r < m; ++r) {
    const int64_t p = r % t.seq;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * stride + h * t.head_dim;
      if constexpr (std::is_same_v<Real, float>) {
        // The device's pair function over contiguous halves and table rows
        // (a loop the compiler vectorizes; the same bits as RopePair).
        float* __restrict x1 = v;
        float* __restrict x2 = v + half;
        const float* __restrict cr = t.cos.data() + p * half;
        const float* __restrict sr = t.sin.data() + p * half;
        const float sign = inverse ? -1.0f : 1.0f;
        for (int64_t i = 0; i < half; ++i) {
          RopePair(x1[i], x2[i], cr[i], sign * sr[i], &x1[i], &x2[i]);
        }
        continue;
      }
      for (int64_t i = 0; i < half; ++i) {
        const double angle =
            p * std::pow(t.theta, -2.0 * static_cast<double>(i) / t.head_dim);
        const Real c = static_cast<Real>(std::cos(angle));
        const Real s = static_cast<Real>(std::sin(angle)) * (inverse ? -1 : 1);
        const Real a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

}  // namespace

absl::StatusOr<RopeTable> RopeTable::Make(int64_t seq, int64_t head_dim, double theta) {
  if (seq < 1 || head_dim < 2 || head_dim % 2 != 0 || seq > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope: seq ", seq, " and head_dim ", head_dim, " (positive, head_dim even)"));
  }
  if (!(theta > 1) || !std::isfinite(theta)) {
    return absl::InvalidArgumentError(absl::StrCat("rope: theta must be > 1, got ", theta));
  }
  RopeTable t;
  t.seq = seq;
  t.head_dim = head_dim;
  t.theta = theta;
  const int64_t half = head_dim / 2;
  t.cos.resize(seq * half);
  t.sin.resize(seq * half);
  for (int64_t i = 0; i < half; ++i) {
    // torch: 1.0 / (theta ** (arange(0, d, 2).float() / d)), in FP32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), exponent);
    for (int64_t p = 0; p < seq; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      t.cos[p * half + i] = std::cos(angle);
      t.sin[p * half + i] = std::sin(angle);
    }
  }
  return t;
}

absl::Status RopeForward(const RopeTable& t, float* x, int64_t m, int64_t heads,
                         int64_t row_stride) {
  if (absl::Status s = RopeCheck(t, m, heads, row_stride); !s.ok()) return s;
  RopeRotate<float>(t, x, m, heads, row_stride, /*inverse=*/false);
  return absl::OkStatus();
}

absl::Status RopeBackward(const RopeTable& t, float* dx, int64_t m, int64_t heads,
                          int64_t row_stride) {
  if (absl::Status s = RopeCheck(t, m, heads, row_stride); !s.ok()) return s;
  RopeRotate<float>(t, dx, m, heads, row_stride, /*inverse=*/true);
  return absl::OkStatus();
}

absl::Status RopeForwardReference(const RopeTable& t, float* x, int64_t m,
                                  int64_t heads, int64_t row_stride) {
  if (absl::Status s = RopeCheck(t, m, heads, row_stride); !s.ok()) return s;
  RopeRotate<double>(t, x, m, heads, row_stride, /*inverse=*/false);
  return absl::OkStatus();
}

absl::Status RopeBackwardReference(const RopeTable& t, float* dx, int64_t m,
                                   int64_t heads, int64_t row_stride) {
  if (absl::Status s = RopeCheck(t, m, heads, row_stride); !s.ok()) return s;
  RopeRotate<double>(t, dx, m, heads, row_stride, /*inverse=*/true);
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
