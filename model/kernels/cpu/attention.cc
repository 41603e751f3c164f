#include "model/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/bf16_convert.h"
#include "model/kernels/cpu/gemm.h"
#include "model/kernels/cpu/threading.h"

namespace zeroshard::kernels::cpu {
namespace {

absl::Status Check(const AttentionShape& s) {
  if (s.batch <= 0 || s.seq <= 0 || s.width <= 0 || s.heads <= 0 ||
      s.width % s.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: bad shape batch=", s.batch, " seq=", s.seq, " width=",
        s.width, " heads=", s.heads));
  }
  if (s.dtype != DType::kFp32 && s.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention: unsupported dtype ", DTypeName(s.dtype)));
  }
  return absl::OkStatus();
}

// Typed element access for FP32 / BF16 buffers.
const void* At(const void* p, DType dt, int64_t i) {
  return static_cast<const char*>(p) + i * static_cast<int64_t>(DTypeSize(dt));
}
float Load(const void* p, DType dt, int64_t i) {
  return dt == DType::kBf16 ? Bf16ToFloat(static_cast<const uint16_t*>(p)[i])
                            : static_cast<const float*>(p)[i];
}
void Store(void* p, DType dt, int64_t i, float v) {
  if (dt == DType::kBf16) {
    static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}
// The value an FP32 operand takes inside a product with a `dt` operand.
float AsOperand(float v, DType dt) {
  return dt == DType::kBf16 ? Bf16ToFloat(FloatToBf16(v)) : v;
}

struct Offsets {
  int64_t hd, c3, q, k, v, y, p;  // element offsets for pair (b, h)
};
Offsets OffsetsFor(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t hd = s.width / s.heads, c3 = 3 * s.width;
  const int64_t row0 = b * s.seq;
  return {hd,
          c3,
          row0 * c3 + h * hd,
          row0 * c3 + s.width + h * hd,
          row0 * c3 + 2 * s.width + h * hd,
          row0 * s.width + h * hd,
          (b * s.heads + h) * s.seq * s.seq};
}

// Runs fn(b, h) for every pair on the OpenMP threads; returns the first error.
template <typename Fn>
absl::Status ForEachPair(const AttentionShape& s, Fn fn) {
  absl::Status first;
  std::mutex mu;
  const int64_t pairs = s.batch * s.heads;
#pragma omp parallel for schedule(dynamic, 1) if (ParallelWorth(pairs * s.seq * s.seq * s.width / s.heads))
  for (int64_t bh = 0; bh < pairs; ++bh) {
    absl::Status st = fn(bh / s.heads, bh % s.heads);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok()) first = st;
    }
  }
  return first;
}

}  // namespace

absl::Status AttentionForward(const AttentionShape& s, const void* qkv,
                              void* probs, float* y) {
  if (absl::Status st = Check(s); !st.ok()) return st;
  const int64_t T = s.seq;
  const DType dt = s.dtype;
  return ForEachPair(s, [&](int64_t b, int64_t h) -> absl::Status {
    const Offsets o = OffsetsFor(s, b, h);
    const float scale = 1.0f / std::sqrt(static_cast<float>(o.hd));
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(T * T));
    GemmDesc qk{.m = T, .n = T, .k = o.hd,
                .a = {At(qkv, dt, o.q), dt, o.c3, false},
                .b = {At(qkv, dt, o.k), dt, o.c3, true},
                .c = scores.data(), .ldc = T};
    if (absl::Status st = Gemm(qk); !st.ok()) return st;
    void* p = const_cast<void*>(At(probs, dt, o.p));
    const bool simd = Avx512Available();
    for (int64_t i = 0; i < T; ++i) {
      float* row = scores.data() + i * T;
      float sum = 0;
      if (simd) {
        sum = ScaledExpRowAvx512(row, i + 1, scale);
      } else {
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j] * scale);
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] * scale - mx);
          sum += row[j];
        }
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
      for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
    }
    if (dt == DType::kBf16) {
      FloatsToBf16(scores.data(), static_cast<uint16_t*>(p), T * T);
    } else {
      std::copy(scores.begin(), scores.end(), static_cast<float*>(p));
    }
    GemmDesc pv{.m = T, .n = o.hd, .k = T,
                .a = {p, dt, T, false},
                .b = {At(qkv, dt, o.v), dt, o.c3, false},
                .c = y + o.y, .ldc = s.width};
    return Gemm(pv);
  });
}

absl::Status AttentionBackward(const AttentionShape& s, const void* qkv,
                               const void* probs, const float* dy,
                               float* dqkv) {
  if (absl::Status st = Check(s); !st.ok()) return st;
  const int64_t T = s.seq;
  const DType dt = s.dtype;
  return ForEachPair(s, [&](int64_t b, int64_t h) -> absl::Status {
    const Offsets o = OffsetsFor(s, b, h);
    const float scale = 1.0f / std::sqrt(static_cast<float>(o.hd));
    const void* p = At(probs, dt, o.p);
    thread_local std::vector<float> dp;
    dp.resize(static_cast<size_t>(T * T));
    // dP = dY V^T
    GemmDesc g1{.m = T, .n = T, .k = o.hd,
                .a = {dy + o.y, DType::kFp32, s.width, false},
                .b = {At(qkv, dt, o.v), dt, o.c3, true},
                .c = dp.data(), .ldc = T};
    if (absl::Status st = Gemm(g1); !st.ok()) return st;
    // dV = P^T dY
    GemmDesc g2{.m = T, .n = o.hd, .k = T,
                .a = {p, dt, T, true},
                .b = {dy + o.y, DType::kFp32, s.width, false},
                .c = dqkv + o.v, .ldc = o.c3};
    if (absl::Status st = Gemm(g2); !st.ok()) return st;
    // dS = P * (dP - rowsum(dP * P)) * scale, in place of dP.
    thread_local std::vector<float> prow;
    prow.resize(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      float* row = dp.data() + i * T;
      const float* pi = prow.data();
      if (dt == DType::kBf16) {
        Bf16sToFloat(static_cast<const uint16_t*>(p) + i * T, prow.data(), i + 1);
      } else {
        pi = static_cast<const float*>(p) + i * T;
      }
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j <= i; ++j) dot += row[j] * pi[j];
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) row[j] = pi[j] * (row[j] - dot) * scale;
      for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
    }
    // dQ = dS K, dK = dS^T Q
    GemmDesc g3{.m = T, .n = o.hd, .k = T,
                .a = {dp.data(), DType::kFp32, T, false},
                .b = {At(qkv, dt, o.k), dt, o.c3, false},
                .c = dqkv + o.q, .ldc = o.c3};
    if (absl::Status st = Gemm(g3); !st.ok()) return st;
    GemmDesc g4{.m = T, .n = o.hd, .k = T,
                .a = {dp.data(), DType::kFp32, T, true},
                .b = {At(qkv, dt, o.q), dt, o.c3, false},
                .c = dqkv + o.k, .ldc = o.c3};
    return Gemm(g4);
  });
}

absl::Status AttentionForwardReference(const AttentionShape& s, const void* qkv,
                                       void* probs, float* y) {
  if (absl::Status st = Check(s); !st.ok()) return st;
  const int64_t T = s.seq;
  const DType dt = s.dtype;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const Offsets o = OffsetsFor(s, b, h);
      const double scale = 1.0 / std::sqrt(static_cast<double>(o.hd));
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> row(static_cast<size_t>(i + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < o.hd; ++d) {
            dot += static_cast<double>(Load(qkv, dt, o.q + i * o.c3 + d)) *
                   Load(qkv, dt, o.k + j * o.c3 + d);
          }
          row[j] = dot * scale;
          mx = std::max(mx, row[j]);
        }
        double sum = 0;
        for (double& r : row) sum += (r = std::exp(r - mx));
        for (int64_t j = 0; j < T; ++j) {
          Store(probs, dt, o.p + i * T + j,
                j <= i ? static_cast<float>(row[j] / sum) : 0.0f);
        }
        for (int64_t d = 0; d < o.hd; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) {
            acc += static_cast<double>(Load(probs, dt, o.p + i * T + j)) *
                   Load(qkv, dt, o.v + j * o.c3 + d);
          }
          y[o.y + i * s.width + d] = static_cast<float>(acc);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AttentionBackwardReference(const AttentionShape& s,
                                        const void* qkv, const void* probs,
                                        const float* dy, float* dqkv) {
  if (absl::Status st = Check(s); !st.ok()) return st;
  const int64_t T = s.seq;
  const DType dt = s.dtype;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const Offsets o = OffsetsFor(s, b, h);
      const double scale = 1.0 / std::sqrt(static_cast<double>(o.hd));
      auto P = [&](int64_t i, int64_t j) { return Load(probs, dt, o.p + i * T + j); };
      auto dY = [&](int64_t i, int64_t d) { return AsOperand(dy[o.y + i * s.width + d], dt); };
      auto Q = [&](int64_t i, int64_t d) { return Load(qkv, dt, o.q + i * o.c3 + d); };
      auto K = [&](int64_t i, int64_t d) { return Load(qkv, dt, o.k + i * o.c3 + d); };
      auto V = [&](int64_t i, int64_t d) { return Load(qkv, dt, o.v + i * o.c3 + d); };
      std::vector<float> ds(static_cast<size_t>(T * T), 0.0f);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> dp(static_cast<size_t>(i + 1));
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < o.hd; ++d) acc += static_cast<double>(dY(i, d)) * V(j, d);
          dp[j] = static_cast<float>(acc);
          dot += dp[j] * P(i, j);
        }
        for (int64_t j = 0; j <= i; ++j) {
          ds[i * T + j] = AsOperand(static_cast<float>(P(i, j) * (dp[j] - dot) * scale), dt);
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t d = 0; d < o.hd; ++d) {
          double dv = 0, dq = 0, dk = 0;
          for (int64_t j = 0; j < T; ++j) {
            dv += static_cast<double>(P(j, i)) * dY(j, d);
            dq += static_cast<double>(ds[i * T + j]) * K(j, d);
            dk += static_cast<double>(ds[j * T + i]) * Q(j, d);
          }
          dqkv[o.v + i * o.c3 + d] = static_cast<float>(dv);
          dqkv[o.q + i * o.c3 + d] = static_cast<float>(dq);
          dqkv[o.k + i * o.c3 + d] = static_cast<float>(dk);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
