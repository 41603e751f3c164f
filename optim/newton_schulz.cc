// Muon's Newton–Schulz iteration on OpenBLAS, and its scalar reference
// (optim/newton_schulz.h).
#include "optim/newton_schulz.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

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
void MatMulRef(const float* a, const float* b, bool bt, int64_t m, int64_t n,
               int64_t k, float* c) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += double{a[i * k + p]} * (bt ? b[j * k + p] : b[p * n + j]);
      }
      c[i * n + j] = static_cast<float>(sum);
    }
  }
}

void MatMulBlas(const float* a, const float* b, bool bt, int64_t m, int64_t n,
                int64_t k, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(k), b,
              static_cast<int>(bt ? k : n), 0.0f, c, static_cast<int>(n));
}

// The iteration on x (s x l) in place, the products through `mm`.
template <typename MatMul>
void Iterate(float* x, int64_t s, int64_t l, NewtonSchulzScratch& w,
             MatMul mm) {
  w.a.resize(s * s);
  w.b.resize(s * s);
  w.y.resize(s * l);
  for (int step = 0; step < kNewtonSchulzSteps; ++step) {
    mm(x, x, /*bt=*/true, s, s, l, w.a.data());            // A = X X^T
    for (int64_t i = 0; i < s * s; ++i) w.b[i] = kNewtonSchulzC * w.a[i];
    mm(w.b.data(), w.a.data(), false, s, s, s, w.y.data());  // (c A) A
    for (int64_t i = 0; i < s * s; ++i) {
      w.b[i] = kNewtonSchulzB * w.a[i] + w.y[i];             // B
    }
    mm(w.b.data(), x, false, s, l, s, w.y.data());           // B X
    for (int64_t i = 0; i < s * l; ++i) {
      x[i] = kNewtonSchulzA * x[i] + w.y[i];
    }
  }
}

template <typename MatMul>
absl::Status Run(const float* g, int64_t rows, int64_t cols, float* out,
                 NewtonSchulzScratch& w, MatMul mm) {
  if (absl::Status s = Check(g, rows, cols, out); !s.ok()) return s;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  w.x.resize(s * l);
  Normalized(g, rows, cols, w.x.data());
  Iterate(w.x.data(), s, l, w, mm);
  Unpack(w.x.data(), rows, cols, out);
  return absl::OkStatus();
}

}  // namespace

absl::Status NewtonSchulz5(const float* g, int64_t rows, int64_t cols,
                           float* out, NewtonSchulzScratch& scratch) {
  return Run(g, rows, cols, out, scratch, MatMulBlas);
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
