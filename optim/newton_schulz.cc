// Muon's Newton–Schulz iteration on oneDNN's matmul, and its scalar
// reference (optim/newton_schulz.h).
#include "optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace zeroshard {
namespace {

absl::Status Check(const float* g, int64_t rows, int64_t cols,
                   const float* out) {
  if (g == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Newton-Schulz: null matrix");
  }
  if (rows < 1 || cols < 1 || rows > (int64_t{1} << 20) ||
      cols > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Newton-Schulz: a ", rows, " x ", cols, " matrix (each dimension 1 "
        "to 2^20)"));
  }
  return absl::OkStatus();
}

// X (s x l) = G or G^T, normalized by its Frobenius norm + 1e-7.
void Normalized(const float* g, int64_t rows, int64_t cols, float* x) {
  const bool t = rows > cols;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  double sq = 0;
  for (int64_t i = 0; i < rows * cols; ++i) sq += double{g[i]} * g[i];
  const float denom = static_cast<float>(std::sqrt(sq)) + 1e-7f;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < l; ++j) {
      x[i * l + j] = (t ? g[j * cols + i] : g[i * l + j]) / denom;
    }
  }
}

void Unpack(const float* x, int64_t rows, int64_t cols, float* out) {
  const bool t = rows > cols;
  const int64_t l = std::max(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      out[i * cols + j] = t ? x[j * l + i] : x[i * l + j];
    }
  }
}

// C (m x n) = A (m x k) * op(B), op(B) = B (k x n) or B^T (B n x k); sums in
// double.
absl::Status MatMulRef(const float* a, const float* b, bool bt, int64_t m,
                       int64_t n, int64_t k, float* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += double{a[i * k + p]} * (bt ? b[j * k + p] : b[p * n + j]);
      }
      c[i * n + j] = static_cast<float>(sum);
    }
  }
  return absl::OkStatus();
}

// The iteration on x (s x l) in place, the products through `mm`.
template <typename MatMul>
absl::Status Iterate(float* x, int64_t s, int64_t l, NewtonSchulzScratch& w,
                     MatMul mm) {
  w.a.resize(s * s);
  w.b.resize(s * s);
  w.y.resize(s * l);
  for (int step = 0; step < kNewtonSchulzSteps; ++step) {
    // A = X X^T
    if (absl::Status st = mm(x, x, true, s, s, l, w.a.data()); !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < s * s; ++i) w.b[i] = kNewtonSchulzC * w.a[i];
    // (c A) A
    if (absl::Status st = mm(w.b.data(), w.a.data(), false, s, s, s,
                             w.y.data());
        !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < s * s; ++i) {
      w.b[i] = kNewtonSchulzB * w.a[i] + w.y[i];  // B
    }
    // B X
    if (absl::Status st = mm(w.b.data(), x, false, s, l, s, w.y.data());
        !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < s * l; ++i) {
      x[i] = kNewtonSchulzA * x[i] + w.y[i];
    }
  }
  return absl::OkStatus();
}

template <typename MatMul>
absl::Status Run(const float* g, int64_t rows, int64_t cols, float* out,
                 NewtonSchulzScratch& w, MatMul mm) {
  if (absl::Status s = Check(g, rows, cols, out); !s.ok()) return s;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  w.x.resize(s * l);
  Normalized(g, rows, cols, w.x.data());
  if (absl::Status st = Iterate(w.x.data(), s, l, w, mm); !st.ok()) return st;
  Unpack(w.x.data(), rows, cols, out);
  return absl::OkStatus();
}

}  // namespace

absl::Status Fp32MatMul(const float* a, const float* b, bool bt, int64_t m,
                        int64_t n, int64_t k, float* c) {
  using dnnl::memory;
  // One engine for the process; primitives and streams per thread (a
  // matmul executed from two threads at once shares its scratchpad).
  static const dnnl::engine* const engine =
      new dnnl::engine(dnnl::engine::kind::cpu, 0);
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t, bool>,
                        dnnl::matmul>
      cache;
  try {
    const memory::desc ad({m, k}, memory::data_type::f32, memory::dims{k, 1});
    const memory::desc bd({k, n}, memory::data_type::f32,
                          bt ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc cd({m, n}, memory::data_type::f32, memory::dims{n, 1});
    const auto key = std::make_tuple(m, n, k, bt);
    auto it = cache.find(key);
    if (it == cache.end()) {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), *engine);
      it = cache.emplace(key, dnnl::matmul(pd)).first;
    }
    thread_local dnnl::stream stream(*engine);
    memory am(ad, *engine, const_cast<float*>(a));
    memory bm(bd, *engine, const_cast<float*>(b));
    memory cm(cd, *engine, c);
    it->second.execute(stream, {{DNNL_ARG_SRC, am},
                                {DNNL_ARG_WEIGHTS, bm},
                                {DNNL_ARG_DST, cm}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("Newton-Schulz: oneDNN matmul failed: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status NewtonSchulz5(const float* g, int64_t rows, int64_t cols,
                           float* out, NewtonSchulzScratch& scratch) {
  return Run(g, rows, cols, out, scratch, Fp32MatMul);
}

absl::Status NewtonSchulz5Reference(const float* g, int64_t rows,
                                    int64_t cols, float* out) {
  NewtonSchulzScratch scratch;
  return Run(g, rows, cols, out, scratch, MatMulRef);
}

double NewtonSchulzFlops(int64_t rows, int64_t cols) {
  const double s = static_cast<double>(std::min(rows, cols));
  const double l = static_cast<double>(std::max(rows, cols));
  return kNewtonSchulzSteps * (2 * s * s * l + 2 * s * s * s + 2 * s * s * l);
}

}  // namespace zeroshard
