// Muon's Newton–Schulz iteration on oneDNN's matmul, and its scalar
// reference (optim/newton_schulz.h).
#include "optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
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

// x as a BF16 tensor holds it: rounded to the nearest BF16 (even on ties).
// Branch-free so that the element-wise passes vectorize; equal to
// FloatToBf16 for every finite value and for quiet NaNs (the iteration's
// values are finite: the servers refuse non-finite gradients).
inline float Bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// The bit patterns of BF16-valued floats (exact: their low halves are 0).
void Bf16Bits(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &in[i], sizeof(u));
    out[i] = static_cast<uint16_t>(u >> 16);
  }
}

// X (s x l) = G or G^T, normalized by its Frobenius norm + 1e-7. BF16: G
// rounded first, then the norm, the sum and each quotient rounded.
void Normalized(const float* g, int64_t rows, int64_t cols, float* x,
                bool bf16) {
  const bool t = rows > cols;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  auto in = [&](int64_t i) { return bf16 ? Bf16(g[i]) : g[i]; };
  double sq = 0;
  for (int64_t i = 0; i < rows * cols; ++i) sq += double{in(i)} * in(i);
  float denom = static_cast<float>(std::sqrt(sq));
  denom = bf16 ? Bf16(Bf16(denom) + 1e-7f) : denom + 1e-7f;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < l; ++j) {
      const float q = in(t ? j * cols + i : i * l + j) / denom;
      x[i * l + j] = bf16 ? Bf16(q) : q;
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

// The iteration on x (s x l) in place, the products through `mm`. BF16:
// every product's FP32 result and every scaling and sum rounded to BF16,
// in the published expression's order (b A + (c A) A; a X + B X).
template <typename MatMul>
absl::Status Iterate(float* x, int64_t s, int64_t l, NewtonSchulzScratch& w,
                     MatMul mm, bool bf16) {
  auto r = [bf16](float v) { return bf16 ? Bf16(v) : v; };
  const float ca = kNewtonSchulzA, cb = kNewtonSchulzB, cc = kNewtonSchulzC;
  w.a.resize(s * s);
  w.b.resize(s * s);
  w.y.resize(s * l);
  for (int step = 0; step < kNewtonSchulzSteps; ++step) {
    // A = X X^T
    if (absl::Status st = mm(x, x, true, s, s, l, w.a.data()); !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < s * s; ++i) w.a[i] = r(w.a[i]);
    for (int64_t i = 0; i < s * s; ++i) w.b[i] = r(cc * w.a[i]);
    // (c A) A
    if (absl::Status st = mm(w.b.data(), w.a.data(), false, s, s, s,
                             w.y.data());
        !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < s * s; ++i) {
      w.b[i] = r(r(cb * w.a[i]) + r(w.y[i]));  // B
    }
    // B X
    if (absl::Status st = mm(w.b.data(), x, false, s, l, s, w.y.data());
        !st.ok()) {
      return st;
    }
    for (int64_t i = 0; i < s * l; ++i) {
      x[i] = r(r(ca * x[i]) + r(w.y[i]));
    }
  }
  return absl::OkStatus();
}

template <typename MatMul>
absl::Status Run(const float* g, int64_t rows, int64_t cols, float* out,
                 NewtonSchulzScratch& w, MatMul mm, bool bf16) {
  if (absl::Status s = Check(g, rows, cols, out); !s.ok()) return s;
  const int64_t s = std::min(rows, cols), l = std::max(rows, cols);
  w.x.resize(s * l);
  Normalized(g, rows, cols, w.x.data(), bf16);
  if (absl::Status st = Iterate(w.x.data(), s, l, w, mm, bf16); !st.ok()) {
    return st;
  }
  Unpack(w.x.data(), rows, cols, out);
  return absl::OkStatus();
}

// oneDNN's matmul, cached per shape and thread: C (m x n, FP32) = A (m x k)
// op(B), A and B of `type` (f32 or bf16).
absl::Status OneDnnMatMul(const void* a, const void* b, bool bt, int64_t m,
                          int64_t n, int64_t k, float* c,
                          dnnl::memory::data_type type) {
  using dnnl::memory;
  // One engine for the process; primitives and streams per thread (a
  // matmul executed from two threads at once shares its scratchpad).
  static const dnnl::engine* const engine =
      new dnnl::engine(dnnl::engine::kind::cpu, 0);
  thread_local std::map<
      std::tuple<int64_t, int64_t, int64_t, bool, memory::data_type>,
      dnnl::matmul>
      cache;
  try {
    const memory::desc ad({m, k}, type, memory::dims{k, 1});
    const memory::desc bd({k, n}, type,
                          bt ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc cd({m, n}, memory::data_type::f32, memory::dims{n, 1});
    const auto key = std::make_tuple(m, n, k, bt, type);
    auto it = cache.find(key);
    if (it == cache.end()) {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), *engine);
      it = cache.emplace(key, dnnl::matmul(pd)).first;
    }
    thread_local dnnl::stream stream(*engine);
    memory am(ad, *engine, const_cast<void*>(a));
    memory bm(bd, *engine, const_cast<void*>(b));
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

}  // namespace

absl::Status Fp32MatMul(const float* a, const float* b, bool bt, int64_t m,
                        int64_t n, int64_t k, float* c) {
  return OneDnnMatMul(a, b, bt, m, n, k, c, dnnl::memory::data_type::f32);
}

absl::Status Bf16MatMul(const uint16_t* a, const uint16_t* b, bool bt,
                        int64_t m, int64_t n, int64_t k, float* c) {
  // oneDNN has no BF16 matmul below AVX-512 (an AVX2-only CPU): the same
  // products in FP32 then, which hold a BF16 product exactly and sum in
  // FP32 as oneDNN's BF16 kernels do.
  static const bool native = [] {
    const uint16_t one = 0x3f80;
    float out = 0;
    return OneDnnMatMul(&one, &one, false, 1, 1, 1, &out,
                        dnnl::memory::data_type::bf16)
               .ok() &&
           out == 1.0f;
  }();
  if (native) {
    return OneDnnMatMul(a, b, bt, m, n, k, c, dnnl::memory::data_type::bf16);
  }
  thread_local std::vector<float> fa, fb;
  fa.resize(m * k);
  fb.resize(k * n);
  for (int64_t i = 0; i < m * k; ++i) fa[i] = Bf16ToFloat(a[i]);
  for (int64_t i = 0; i < k * n; ++i) fb[i] = Bf16ToFloat(b[i]);
  return Fp32MatMul(fa.data(), fb.data(), bt, m, n, k, c);
}

absl::Status NewtonSchulz5(const float* g, int64_t rows, int64_t cols,
                           float* out, NewtonSchulzScratch& scratch,
                           NsPrecision precision) {
  if (precision == NsPrecision::kFp32) {
    return Run(g, rows, cols, out, scratch, Fp32MatMul, false);
  }
  // The operands are BF16-valued floats: their bit patterns, exactly (X
  // X^T converts X once).
  auto bf16_mm = [&scratch](const float* a, const float* b, bool bt,
                            int64_t m, int64_t n, int64_t k, float* c) {
    scratch.h0.resize(m * k);
    Bf16Bits(a, scratch.h0.data(), m * k);
    const uint16_t* bh = scratch.h0.data();
    if (b != a) {
      scratch.h1.resize(k * n);
      Bf16Bits(b, scratch.h1.data(), k * n);
      bh = scratch.h1.data();
    }
    return Bf16MatMul(scratch.h0.data(), bh, bt, m, n, k, c);
  };
  return Run(g, rows, cols, out, scratch, bf16_mm, true);
}

absl::Status NewtonSchulz5Reference(const float* g, int64_t rows,
                                    int64_t cols, float* out,
                                    NsPrecision precision) {
  NewtonSchulzScratch scratch;
  return Run(g, rows, cols, out, scratch, MatMulRef,
             precision == NsPrecision::kBf16);
}

double NewtonSchulzFlops(int64_t rows, int64_t cols) {
  const double s = static_cast<double>(std::min(rows, cols));
  const double l = static_cast<double>(std::max(rows, cols));
  return kNewtonSchulzSteps * (2 * s * s * l + 2 * s * s * s + 2 * s * s * l);
}

}  // namespace zeroshard
