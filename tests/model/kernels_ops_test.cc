// Every CPU op's backward against central finite differences (FP32 inputs,
// the scalar loss sum(out * r) accumulated in double; step 1e-2, tolerance
// 5e-3 + 2e-2 * |numeric| per element, and over the whole gradient
// ||analytic - numeric|| <= 2e-2 ||numeric|| with an RMS numeric gradient of
// at least 1e-2, which a zero, halved or sign-flipped gradient cannot pass);
// the BF16 linear and attention backward against the same differences
// (inputs on a grid BF16 holds exactly); the attention fast path against its scalar
// reference on fresh random inputs (FP32 and BF16), the GELU, BF16
// conversion and AVX-512 softmax fast paths against their references, and
// the gradient checks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "model/kernels/cpu/avx512.h"
#include "model/kernels/cpu/bf16_convert.h"
#include "model/kernels/cpu/cpu_kernels.h"

namespace zeroshard::kernels::cpu {
namespace {

std::mt19937& Rng() {
  static std::mt19937 rng(static_cast<uint32_t>(zeroshard::testing::TestSeed()));
  return rng;
}

std::vector<float> Random(size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(Rng());
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// The central difference (loss(x + eps e_i) - loss(x - eps e_i)) / 2 eps
// for every i, perturbing x in place.
std::vector<double> NumericGradient(std::vector<float>& x,
                                    const std::function<double()>& loss,
                                    float eps) {
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    numeric[i] = (up - down) / (2.0 * eps);
  }
  return numeric;
}

// analytic against numeric: element by element (abs_tol + rel_tol *
// |numeric|), and as a whole (||analytic - numeric|| <= l2_tol *
// ||numeric||, with the numeric gradient's RMS at least 1e-2, so that a
// zero, halved or sign-flipped gradient cannot pass).
void ExpectMatchesNumeric(const char* what, const std::vector<float>& analytic,
                          const std::vector<double>& numeric, double rel_tol,
                          double abs_tol, double l2_tol) {
  ASSERT_EQ(analytic.size(), numeric.size());
  double diff2 = 0, numeric2 = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    ASSERT_NEAR(analytic[i], numeric[i],
                abs_tol + rel_tol * std::fabs(numeric[i]))
        << what << "[" << i << "]";
    diff2 += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
    numeric2 += numeric[i] * numeric[i];
  }
  const double rms = std::sqrt(numeric2 / static_cast<double>(numeric.size()));
  EXPECT_GE(rms, 1e-2) << what << ": the numeric gradient is ~0; the check "
                       << "would pass a zero gradient";
  EXPECT_LE(std::sqrt(diff2), l2_tol * std::sqrt(numeric2))
      << what << ": relative L2 error";
}

// Checks analytic[i] == d loss / d x[i] for every i, perturbing x in place
// by +-eps (FP32: 5e-3 + 2e-2 |numeric| per element, 2e-2 in L2).
void ExpectGradient(const char* what, std::vector<float>& x,
                    const std::vector<float>& analytic,
                    const std::function<double()>& loss, float eps = 1e-2f,
                    double rel_tol = 2e-2, double abs_tol = 5e-3,
                    double l2_tol = 2e-2) {
  ASSERT_EQ(x.size(), analytic.size());
  ExpectMatchesNumeric(what, analytic, NumericGradient(x, loss, eps), rel_tol,
                       abs_tol, l2_tol);
}

// Random values k / 64 with |k| <= 60: BF16 holds them, and them +- 1/16,
// exactly (at most 7 significant bits).
std::vector<float> GridRandom(size_t n) {
  std::uniform_int_distribution<int> k(-60, 60);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(k(Rng())) / 64.0f;
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

TEST(OpsGradientTest, LayerNorm) {
  const int64_t M = 3, C = 7;
  auto x = Random(M * C, 2.0f), g = Random(C), b = Random(C), r = Random(M * C);
  std::vector<float> y(M * C), mean(M), rstd(M);
  auto loss = [&] {
    EXPECT_TRUE(LayerNormForward(x.data(), g.data(), b.data(), M, C, y.data(),
                                 mean.data(), rstd.data()).ok());
    return Dot(y, r);
  };
  loss();
  std::vector<float> dx(M * C, 0.0f), dg(C, 0.0f), db(C, 0.0f);
  ASSERT_TRUE(LayerNormBackward(r.data(), x.data(), g.data(), mean.data(),
                                rstd.data(), M, C, dx.data(), dg.data(), db.data()).ok());
  ExpectGradient("dx", x, dx, loss);
  ExpectGradient("dgamma", g, dg, loss);
  ExpectGradient("dbeta", b, db, loss);
}

TEST(OpsGradientTest, Gelu) {
  const int64_t n = 37;
  auto x = Random(n, 3.0f), r = Random(n);
  std::vector<float> y(n), dx(n);
  auto loss = [&] {
    GeluForward(x.data(), y.data(), n);
    return Dot(y, r);
  };
  GeluBackward(x.data(), r.data(), dx.data(), n);
  ExpectGradient("dx", x, dx, loss);
}

TEST(OpsGradientTest, ResidualAdd) {
  auto a = Random(9), b = Random(9), r = Random(9);
  std::vector<float> y(9);
  auto loss = [&] {
    ResidualForward(a.data(), b.data(), y.data(), 9);
    return Dot(y, r);
  };
  ExpectGradient("da", a, r, loss);  // the gradient passes through unchanged
  ExpectGradient("db", b, r, loss);
}

TEST(OpsGradientTest, Linear) {
  const int64_t M = 5, in = 6, out = 9;
  auto x = Random(M * in), w = Random(in * out), b = Random(out), r = Random(M * out);
  std::vector<float> y(M * out);
  auto loss = [&] {
    EXPECT_TRUE(LinearForward({x.data(), DType::kFp32}, {w.data(), DType::kFp32},
                              b.data(), M, in, out, y.data()).ok());
    return Dot(y, r);
  };
  std::vector<float> dx(M * in), dw(in * out, 0.0f), db(out, 0.0f);
  ASSERT_TRUE(LinearBackward(r.data(), {x.data(), DType::kFp32}, {w.data(), DType::kFp32},
                             M, in, out, dx.data(), dw.data(), db.data()).ok());
  ExpectGradient("dx", x, dx, loss);
  ExpectGradient("dw", w, dw, loss);
  ExpectGradient("db", b, db, loss);
}

// BF16 operands: x and W on the grid BF16 holds exactly, perturbed by 1/16
// (still on it), so the forward is exact and the numeric gradient is the
// true one. The backward rounds dy (= r) to BF16 (linear.h), which bounds
// how far each element may be off (below).
TEST(OpsGradientTest, LinearBf16) {
  const int64_t M = 5, in = 6, out = 9;
  auto x = GridRandom(M * in), w = GridRandom(in * out);
  auto b = Random(out), r = Random(M * out);
  std::vector<float> y(M * out);
  auto loss = [&] {
    const std::vector<uint16_t> xb = ToBf16(x), wb = ToBf16(w);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(Bf16ToFloat(xb[i]), x[i]);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(Bf16ToFloat(wb[i]), w[i]);
    EXPECT_TRUE(LinearForward({xb.data(), DType::kBf16}, {wb.data(), DType::kBf16},
                              b.data(), M, in, out, y.data()).ok());
    return Dot(y, r);
  };
  const std::vector<uint16_t> xb = ToBf16(x), wb = ToBf16(w);
  std::vector<float> dx(M * in), dw(in * out, 0.0f), db(out, 0.0f);
  ASSERT_TRUE(LinearBackward(r.data(), {xb.data(), DType::kBf16},
                             {wb.data(), DType::kBf16}, M, in, out, dx.data(),
                             dw.data(), db.data()).ok());
  // |BF16(r) - r| <= 2^-9 |r|, so an element of dx (a sum of `out` terms
  // r * w, |r| <= 1, |w| <= 60/64) is off by at most 2^-9 * 9 < 2e-2, one of
  // dw (M = 5 terms) by less than 1e-2.
  ExpectGradient("dx bf16", x, dx, loss, 1.0f / 16, 0, 2e-2, 2e-2);
  ExpectGradient("dw bf16", w, dw, loss, 1.0f / 16, 0, 1e-2, 2e-2);
  ExpectGradient("db bf16", b, db, loss);
}

// BF16 attention: the backward from BF16 q, k, v (on the grid, so they are
// the FP32 inputs exactly) and the BF16-rounded saved probabilities, against
// the FP32 forward's finite differences at the same point: the true
// gradient, which the BF16 one must approximate to within the rounding of
// the probabilities (2^-9 relative each).
TEST(OpsGradientTest, AttentionBf16) {
  AttentionShape s32{.batch = 2, .seq = 5, .width = 6, .heads = 2, .dtype = DType::kFp32};
  AttentionShape s16 = s32;
  s16.dtype = DType::kBf16;
  auto qkv = GridRandom(s32.batch * s32.seq * 3 * s32.width);
  auto r = Random(s32.batch * s32.seq * s32.width);
  const size_t np = s32.batch * s32.heads * s32.seq * s32.seq;
  std::vector<float> probs(np), y(r.size());
  auto loss = [&] {
    EXPECT_TRUE(AttentionForward(s32, qkv.data(), probs.data(), y.data()).ok());
    return Dot(y, r);
  };
  const std::vector<uint16_t> qkv16 = ToBf16(qkv);
  for (size_t i = 0; i < qkv.size(); ++i) ASSERT_EQ(Bf16ToFloat(qkv16[i]), qkv[i]);
  std::vector<uint16_t> probs16(np);
  ASSERT_TRUE(AttentionForward(s16, qkv16.data(), probs16.data(), y.data()).ok());
  std::vector<float> dqkv(qkv.size());
  ASSERT_TRUE(AttentionBackward(s16, qkv16.data(), probs16.data(), r.data(),
                                dqkv.data()).ok());
  ExpectGradient("dqkv bf16", qkv, dqkv, loss, 1e-2f, 2e-2, 1e-2, 2e-2);
}

TEST(OpsGradientTest, Attention) {
  AttentionShape s{.batch = 2, .seq = 5, .width = 6, .heads = 2, .dtype = DType::kFp32};
  auto qkv = Random(s.batch * s.seq * 3 * s.width, 1.5f);
  auto r = Random(s.batch * s.seq * s.width);
  std::vector<float> probs(s.batch * s.heads * s.seq * s.seq), y(r.size());
  auto loss = [&] {
    EXPECT_TRUE(AttentionForward(s, qkv.data(), probs.data(), y.data()).ok());
    return Dot(y, r);
  };
  loss();
  std::vector<float> dqkv(qkv.size());
  ASSERT_TRUE(AttentionBackward(s, qkv.data(), probs.data(), r.data(), dqkv.data()).ok());
  ExpectGradient("dqkv", qkv, dqkv, loss);
}

TEST(OpsGradientTest, CrossEntropy) {
  const int64_t M = 4, V = 10;
  auto logits = Random(M * V, 3.0f);
  std::vector<int32_t> targets = {3, 0, 9, 3};
  std::vector<float> d(M * V), d8(M * V), scratch(M * V);
  double loss0 = 0;
  ASSERT_TRUE(SoftmaxCrossEntropy(logits.data(), targets.data(), M, V, 1.0f, &loss0,
                                  d.data()).ok());
  double loss8 = 0;
  ASSERT_TRUE(SoftmaxCrossEntropy(logits.data(), targets.data(), M, V, 8.0f, &loss8,
                                  d8.data()).ok());
  EXPECT_EQ(loss0, loss8);  // the loss is reported unscaled
  for (int64_t i = 0; i < M * V; ++i) EXPECT_FLOAT_EQ(d8[i], 8.0f * d[i]);
  auto loss = [&] {
    double l = 0;
    EXPECT_TRUE(SoftmaxCrossEntropy(logits.data(), targets.data(), M, V, 1.0f, &l,
                                    scratch.data()).ok());
    return l;
  };
  ExpectGradient("dlogits", logits, d, loss);
  std::vector<int32_t> bad = {3, 0, 10, 3};
  EXPECT_EQ(SoftmaxCrossEntropy(logits.data(), bad.data(), M, V, 1.0f, &loss0, d.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OpsGradientTest, Embedding) {
  const int64_t B = 2, T = 4, C = 5, V = 7;
  std::vector<int32_t> tokens = {1, 6, 1, 0, 2, 2, 5, 1};
  auto wte = Random(V * C), wpe = Random(T * C), r = Random(B * T * C);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    EXPECT_TRUE(EmbeddingForward(tokens.data(), B, T, C, V, wte.data(), wpe.data(),
                                 out.data()).ok());
    return Dot(out, r);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  ASSERT_TRUE(EmbeddingBackward(r.data(), tokens.data(), B, T, C, V, dwte.data(),
                                dwpe.data()).ok());
  ExpectGradient("dwte", wte, dwte, loss);
  ExpectGradient("dwpe", wpe, dwpe, loss);
  tokens[3] = -1;
  EXPECT_EQ(EmbeddingForward(tokens.data(), B, T, C, V, wte.data(), wpe.data(),
                             out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// Fast attention vs its reference, one dtype.
void CompareAttention(DType dt, float tol) {
  AttentionShape s{.batch = 2, .seq = 13, .width = 24, .heads = 3, .dtype = dt};
  const size_t nqkv = s.batch * s.seq * 3 * s.width, ny = s.batch * s.seq * s.width;
  const size_t np = s.batch * s.heads * s.seq * s.seq;
  const size_t es = DTypeSize(dt);
  auto qkv_f = Random(nqkv, 2.0f), dy = Random(ny);
  std::vector<char> qkv(nqkv * es), p_fast(np * es), p_ref(np * es);
  if (dt == DType::kBf16) {
    FloatToBf16Array(qkv_f.data(), reinterpret_cast<uint16_t*>(qkv.data()), nqkv);
  } else {
    std::memcpy(qkv.data(), qkv_f.data(), nqkv * es);
  }
  std::vector<float> y_fast(ny), y_ref(ny);
  ASSERT_TRUE(AttentionForward(s, qkv.data(), p_fast.data(), y_fast.data()).ok());
  ASSERT_TRUE(AttentionForwardReference(s, qkv.data(), p_ref.data(), y_ref.data()).ok());
  auto load = [&](const std::vector<char>& p, size_t i) {
    return dt == DType::kBf16 ? Bf16ToFloat(reinterpret_cast<const uint16_t*>(p.data())[i])
                              : reinterpret_cast<const float*>(p.data())[i];
  };
  for (size_t i = 0; i < np; ++i) ASSERT_NEAR(load(p_fast, i), load(p_ref, i), tol) << i;
  for (size_t i = 0; i < ny; ++i) ASSERT_NEAR(y_fast[i], y_ref[i], 4 * tol) << i;
  // Backward from the same saved probabilities.
  std::vector<float> dq_fast(nqkv), dq_ref(nqkv);
  ASSERT_TRUE(AttentionBackward(s, qkv.data(), p_fast.data(), dy.data(), dq_fast.data()).ok());
  ASSERT_TRUE(AttentionBackwardReference(s, qkv.data(), p_fast.data(), dy.data(),
                                         dq_ref.data()).ok());
  for (size_t i = 0; i < nqkv; ++i) ASSERT_NEAR(dq_fast[i], dq_ref[i], 4 * tol) << i;
}

TEST(AttentionReferenceTest, Fp32FastMatchesReference) { CompareAttention(DType::kFp32, 1e-5f); }
// One BF16 ulp (2^-8 relative) of a probability <= 1 may differ where the
// FP32 and double softmax round differently.
TEST(AttentionReferenceTest, Bf16FastMatchesReference) { CompareAttention(DType::kBf16, 8e-3f); }

TEST(GeluReferenceTest, FastMatchesReference) {
  const int64_t n = 100003;  // not a multiple of any vector width
  auto x = Random(n, 12.0f), dy = Random(n);
  x[0] = 0.0f;
  x[1] = 1e-6f;
  std::vector<float> y(n), y_ref(n), dx(n), dx_ref(n);
  GeluForward(x.data(), y.data(), n);
  GeluForwardReference(x.data(), y_ref.data(), n);
  GeluBackward(x.data(), dy.data(), dx.data(), n);
  GeluBackwardReference(x.data(), dy.data(), dx_ref.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    // tanh absolute error ~1e-7, scaled by |x| (forward) or |x du| (backward).
    ASSERT_NEAR(y[i], y_ref[i], 4e-7f * (1.0f + std::fabs(x[i]))) << x[i];
    ASSERT_NEAR(dx[i], dx_ref[i], 4e-7f * (1.0f + x[i] * x[i] * x[i] * x[i])) << x[i];
  }
}

// The portable GELU loops (run where AVX-512 is missing) against the
// reference, with the same bound as the dispatched path above.
TEST(GeluReferenceTest, ScalarMatchesReference) {
  const int64_t n = 50021;
  auto x = Random(n, 12.0f), dy = Random(n);
  std::vector<float> y(n), y_ref(n), dx(n), dx_ref(n);
  GeluForwardScalar(x.data(), y.data(), n);
  GeluForwardReference(x.data(), y_ref.data(), n);
  GeluBackwardScalar(x.data(), dy.data(), dx.data(), n);
  GeluBackwardReference(x.data(), dy.data(), dx_ref.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(y[i], y_ref[i], 4e-7f * (1.0f + std::fabs(x[i]))) << x[i];
    ASSERT_NEAR(dx[i], dx_ref[i], 4e-7f * (1.0f + x[i] * x[i] * x[i] * x[i])) << x[i];
  }
}

// Bulk BF16 conversions (dispatched and scalar) are bit-identical to
// common/dtype.h element by element, including NaN, +-Inf, denormals, ties
// and the round-up carry into the exponent; lengths cover the vector tails
// and the multi-threaded split.
TEST(Bf16ConvertTest, BitIdenticalToDtypeReference) {
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{1000003}}) {
    std::vector<uint32_t> bits(static_cast<size_t>(n));
    std::uniform_int_distribution<uint32_t> any;
    for (uint32_t& b : bits) b = any(Rng());
    const uint32_t specials[] = {0x7FC00000u, 0xFF800001u, 0x7F800000u, 0xFF800000u,
                                 0x00000001u, 0x807FFFFFu, 0x3F808000u, 0x3F818000u,
                                 0x7F7FFFFFu, 0x00000000u, 0x80000000u};
    for (size_t i = 0; i < std::size(specials) && i < bits.size(); ++i) {
      bits[bits.size() - 1 - i] = specials[i];
    }
    std::vector<float> f(bits.size());
    std::memcpy(f.data(), bits.data(), bits.size() * 4);
    std::vector<uint16_t> want(bits.size()), fast(bits.size()), scalar(bits.size());
    for (size_t i = 0; i < f.size(); ++i) want[i] = FloatToBf16(f[i]);
    FloatsToBf16(f.data(), fast.data(), n);
    FloatsToBf16Scalar(f.data(), scalar.data(), n);
    ASSERT_EQ(fast, want) << "n=" << n;
    ASSERT_EQ(scalar, want) << "n=" << n;
    std::vector<float> back(f.size()), back_scalar(f.size()), rounded = f;
    Bf16sToFloat(want.data(), back.data(), n);
    Bf16sToFloatScalar(want.data(), back_scalar.data(), n);
    RoundFloatsThroughBf16(rounded.data(), n);
    for (size_t i = 0; i < f.size(); ++i) {
      const float r = Bf16ToFloat(want[i]);
      ASSERT_EQ(std::memcmp(&back[i], &r, 4), 0) << i;
      ASSERT_EQ(std::memcmp(&back_scalar[i], &r, 4), 0) << i;
      ASSERT_EQ(std::memcmp(&rounded[i], &r, 4), 0) << i;
    }
  }
}

// The AVX-512 softmax row (exp(row * scale - max), returns the sum) against
// double precision, on lengths around the vector width.
TEST(Avx512Test, ScaledExpRowMatchesDouble) {
  if (!Avx512Available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int64_t n : {1, 5, 16, 17, 33, 255}) {
    auto row = Random(static_cast<size_t>(n), 30.0f);
    const float scale = 0.125f;
    double mx = -INFINITY;
    for (float v : row) mx = std::max(mx, static_cast<double>(v) * scale);
    std::vector<double> want(row.size());
    double want_sum = 0;
    for (size_t j = 0; j < row.size(); ++j) {
      want_sum += want[j] = std::exp(static_cast<double>(row[j]) * scale - mx);
    }
    std::vector<float> got = row;
    const float sum = ScaledExpRowAvx512(got.data(), n, scale);
    EXPECT_NEAR(sum, want_sum, 2e-6 * want_sum) << "n=" << n;
    for (size_t j = 0; j < row.size(); ++j) {
      ASSERT_NEAR(got[j], want[j], 1e-6 * want[j] + 1e-30) << "n=" << n << " j=" << j;
    }
  }
}

}  // namespace
}  // namespace zeroshard::kernels::cpu
