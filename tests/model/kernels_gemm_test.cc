// The oneDNN matrix product against its scalar reference on fresh random
// inputs: odd sizes, every transpose combination, padded leading dimensions,
// FP32 / BF16 / mixed operands, overwrite and accumulate; the bias / GELU
// epilogue; and the column-major form the CUDA path hands cuBLASLt
// (ToColumnMajor, executed here by a plain column-major loop).
#include <cmath>
#include <cstdio>
#include <string>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "model/kernels/cpu/gemm.h"
#include "model/kernels/element_math.h"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::kernels::cpu {
namespace {

struct Operand {
  std::vector<float> f;
  std::vector<uint16_t> h;
  MatRef ref;
};

Operand MakeOperand(std::mt19937& rng, int64_t rows, int64_t cols, bool trans,
                    DType dt, int64_t pad) {
  Operand o;
  const int64_t srows = trans ? cols : rows, scols = trans ? rows : cols;
  const int64_t ld = scols + pad;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  o.f.resize(srows * ld);
  for (float& v : o.f) v = u(rng);
  if (dt == DType::kBf16) {
    o.h.resize(o.f.size());
    FloatToBf16Array(o.f.data(), o.h.data(), o.f.size());
    o.ref = {o.h.data(), dt, ld, trans};
  } else {
    o.ref = {o.f.data(), dt, ld, trans};
  }
  return o;
}

TEST(GemmTest, MatchesReferenceOnRandomShapes) {
  const uint64_t seed = zeroshard::testing::TestSeed();
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int64_t> size(1, 67);
  const DType pairs[][2] = {{DType::kFp32, DType::kFp32},
                            {DType::kBf16, DType::kBf16},
                            {DType::kFp32, DType::kBf16},
                            {DType::kBf16, DType::kFp32}};
  for (int trial = 0; trial < 48; ++trial) {
    const int64_t m = size(rng), n = size(rng), k = size(rng);
    const bool ta = trial & 1, tb = trial & 2, acc = trial & 4;
    const auto& dt = pairs[(trial / 8) % 4];
    Operand a = MakeOperand(rng, m, k, ta, dt[0], trial % 3);
    Operand b = MakeOperand(rng, k, n, tb, dt[1], trial % 5);
    const int64_t ldc = n + trial % 2;
    std::vector<float> c(m * ldc), want;
    for (float& v : c) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    want = c;
    GemmDesc g{.m = m, .n = n, .k = k, .a = a.ref, .b = b.ref, .c = c.data(),
               .ldc = ldc, .accumulate = acc};
    ASSERT_TRUE(Gemm(g).ok());
    g.c = want.data();
    ASSERT_TRUE(GemmReference(g).ok());
    // FP32 accumulation of k products of magnitude <= 1.
    const float tol = 2e-6f * k + 1e-6f;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], tol)
            << "trial " << trial << " m=" << m << " n=" << n << " k=" << k
            << " at " << i << "," << j;
      }
    }
  }
}

// BLAS semantics on column-major storage: element (r, c) of a stored
// column-major matrix with leading dimension ld is data[c * ld + r].
double LoadColumnMajor(const ColumnMajorOperand& o, int64_t r, int64_t c) {
  const int64_t idx = c * o.ld + r;
  return o.dtype == DType::kBf16
             ? Bf16ToFloat(static_cast<const uint16_t*>(o.data)[idx])
             : static_cast<const float*>(o.data)[idx];
}

// D = op(a) op(b) + beta C, then bias per row of D and GELU, as cuBLASLt's
// matmul with its epilogue computes it.
void RunColumnMajor(const ColumnMajorGemm& cm) {
  for (int64_t i = 0; i < cm.m; ++i) {
    for (int64_t j = 0; j < cm.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < cm.k; ++p) {
        const double x = cm.a.trans ? LoadColumnMajor(cm.a, p, i)
                                    : LoadColumnMajor(cm.a, i, p);
        const double y = cm.b.trans ? LoadColumnMajor(cm.b, j, p)
                                    : LoadColumnMajor(cm.b, p, j);
        acc += x * y;
      }
      float& out = cm.c[j * cm.ldc + i];
      float v = static_cast<float>(acc) + cm.beta * out;
      if (cm.bias != nullptr) v += cm.bias[i];
      out = cm.gelu ? GeluForwardElement(v) : v;
    }
  }
}

TEST(GemmTest, ColumnMajorFormIsTheSameProduct) {
  const uint64_t seed = zeroshard::testing::TestSeed();
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int64_t> size(1, 41);
  for (int trial = 0; trial < 64; ++trial) {
    const int64_t m = size(rng), n = size(rng), k = size(rng);
    const bool ta = trial & 1, tb = trial & 2, acc = trial & 4;
    const bool bias = trial & 8, gelu = trial & 16;
    const DType dt = (trial & 32) ? DType::kBf16 : DType::kFp32;
    Operand a = MakeOperand(rng, m, k, ta, dt, trial % 3);
    Operand b = MakeOperand(rng, k, n, tb, dt, trial % 4);
    const int64_t ldc = n + trial % 3;
    std::vector<float> bias_v(n);
    for (float& v : bias_v) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> c(m * ldc);
    for (float& v : c) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> want = c;
    GemmDesc g{.m = m, .n = n, .k = k, .a = a.ref, .b = b.ref, .c = c.data(),
               .ldc = ldc, .accumulate = acc,
               .bias = bias ? bias_v.data() : nullptr, .gelu = gelu};
    ASSERT_TRUE(ValidateGemm(g).ok());
    const ColumnMajorGemm cm = ToColumnMajor(g);
    ASSERT_EQ(cm.m, n);
    ASSERT_EQ(cm.n, m);
    RunColumnMajor(cm);
    g.c = want.data();
    ASSERT_TRUE(GemmReference(g).ok());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], 1e-5f * (k + 1))
            << "trial " << trial << " m=" << m << " n=" << n << " k=" << k
            << " ta=" << ta << " tb=" << tb << " at " << i << "," << j;
      }
      for (int64_t j = n; j < ldc; ++j) {
        ASSERT_EQ(c[i * ldc + j], want[i * ldc + j]) << "padding written";
      }
    }
  }
}

TEST(GemmTest, EpilogueMatchesTheReference) {
  const uint64_t seed = zeroshard::testing::TestSeed();
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t m = 37, n = 29, k = 53;
  for (int variant = 1; variant < 8; ++variant) {
    const bool bias = variant & 1, gelu = variant & 2, acc = variant & 4;
    Operand a = MakeOperand(rng, m, k, false, DType::kBf16, 0);
    Operand b = MakeOperand(rng, k, n, true, DType::kBf16, 1);
    std::vector<float> bias_v(n), c(m * n);
    for (float& v : bias_v) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    for (float& v : c) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> want = c;
    GemmDesc g{.m = m, .n = n, .k = k, .a = a.ref, .b = b.ref, .c = c.data(),
               .ldc = n, .accumulate = acc,
               .bias = bias ? bias_v.data() : nullptr, .gelu = gelu};
    ASSERT_TRUE(Gemm(g).ok());
    g.c = want.data();
    ASSERT_TRUE(GemmReference(g).ok());
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR(c[i], want[i], 2e-6f * k + 1e-6f)
          << "variant " << variant << " at " << i;
    }
    // The epilogue did something: without it the result differs.
    GemmDesc plain = g;
    plain.bias = nullptr;
    plain.gelu = false;
    std::vector<float> raw = c;
    plain.c = raw.data();
    plain.accumulate = false;
    ASSERT_TRUE(GemmReference(plain).ok());
    int differ = 0;
    for (int64_t i = 0; i < m * n; ++i) differ += raw[i] != c[i];
    EXPECT_GT(differ, m * n / 2) << "variant " << variant;
  }
}

// The path an AVX2-only CPU takes (oneDNN has no BF16 matmul there), forced
// on any CPU: BF16 and mixed operands widened to FP32 give the reference's
// products.
TEST(GemmTest, WidenedBf16PathMatchesReference) {
  const uint64_t seed = zeroshard::testing::TestSeed();
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int64_t> size(1, 67);
  std::printf("BF16 products on this CPU: %s\n",
              std::string(Bf16GemmPath()).c_str());
  ForceBf16WideningForTesting(true);
  EXPECT_EQ(Bf16GemmPath(), "widened");
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t m = size(rng), n = size(rng), k = size(rng);
    const bool ta = trial & 1, tb = trial & 2, acc = trial & 4;
    const DType da = DType::kBf16, db = (trial & 8) ? DType::kFp32 : DType::kBf16;
    Operand a = MakeOperand(rng, m, k, ta, da, trial % 3);
    Operand b = MakeOperand(rng, k, n, tb, db, trial % 2);
    std::vector<float> c(m * n);
    for (float& v : c) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> want = c;
    GemmDesc g{.m = m, .n = n, .k = k, .a = a.ref, .b = b.ref, .c = c.data(),
               .ldc = n, .accumulate = acc};
    ASSERT_TRUE(Gemm(g).ok()) << Gemm(g);
    g.c = want.data();
    ASSERT_TRUE(GemmReference(g).ok());
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR(c[i], want[i], 2e-6f * k + 1e-6f) << "trial " << trial;
    }
  }
  ForceBf16WideningForTesting(false);
}

// A strided batch, laid out as attention's per-head products are (heads
// side by side in one row of width H * hd, ld = 3C-like strides): the fast
// path and the column-major form (what cuBLASLt is given, batch strides
// swapped with the operands) each equal the per-item reference.
TEST(GemmTest, StridedBatchIsEachItemsProduct) {
  const uint64_t seed = zeroshard::testing::TestSeed();
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1, 1);
  for (const DType dt : {DType::kFp32, DType::kBf16}) {
    const int64_t heads = 3, T = 13, hd = 8, ld = 3 * heads * hd;
    std::vector<float> qkv(T * ld), scores(heads * T * T), want(heads * T * T);
    for (float& v : qkv) v = u(rng);
    std::vector<uint16_t> qkv16(qkv.size());
    FloatToBf16Array(qkv.data(), qkv16.data(), qkv.size());
    const void* base = dt == DType::kBf16 ? static_cast<const void*>(qkv16.data())
                                          : qkv.data();
    const size_t es = DTypeSize(dt);
    // S_h = Q_h K_h^T for every head h.
    GemmDesc g{.m = T, .n = T, .k = hd,
               .a = {base, dt, ld, false},
               .b = {static_cast<const char*>(base) + heads * hd * es, dt, ld, true},
               .c = scores.data(), .ldc = T,
               .batch = heads, .stride_a = hd, .stride_b = hd, .stride_c = T * T};
    ASSERT_TRUE(Gemm(g).ok());
    for (int64_t h = 0; h < heads; ++h) {
      GemmDesc one = BatchItem(g, h);
      one.c = want.data() + h * T * T;
      ASSERT_TRUE(GemmReference(one).ok());
    }
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(scores[i], want[i], 1e-4f) << DTypeName(dt) << " at " << i;
    }
    // The column-major form, item by item with its own strides.
    const ColumnMajorGemm cm = ToColumnMajor(g);
    ASSERT_EQ(cm.batch, heads);
    std::vector<float> col(heads * T * T, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      ColumnMajorGemm item = cm;
      item.a.data = static_cast<const char*>(cm.a.data) + h * cm.stride_a * es;
      item.b.data = static_cast<const char*>(cm.b.data) + h * cm.stride_b * es;
      item.c = col.data() + h * cm.stride_c;
      RunColumnMajor(item);
    }
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(col[i], want[i], 1e-4f) << DTypeName(dt) << " at " << i;
    }
  }
  // Refusals: no epilogue on a batch, no negative stride, batch >= 1.
  std::vector<float> a(16), b(16), c(64), bias(4);
  GemmDesc bad{.m = 4, .n = 4, .k = 4, .a = {a.data(), DType::kFp32, 4},
               .b = {b.data(), DType::kFp32, 4}, .c = c.data(), .ldc = 4,
               .bias = bias.data(), .batch = 2, .stride_c = 16};
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
  bad.bias = nullptr;
  bad.stride_a = -1;
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
  bad.stride_a = 0;
  bad.batch = 0;
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GemmTest, RejectsBadArguments) {
  std::vector<float> a(16), b(16), c(16);
  GemmDesc g{.m = 4, .n = 4, .k = 4, .a = {a.data(), DType::kFp32, 4},
             .b = {b.data(), DType::kFp32, 4}, .c = c.data(), .ldc = 4};
  EXPECT_TRUE(Gemm(g).ok());
  GemmDesc bad = g;
  bad.a.ld = 3;
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = g;
  bad.b.data = nullptr;
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = g;
  bad.a.dtype = DType::kFp16;
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = g;
  bad.k = 0;
  EXPECT_EQ(Gemm(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = g;
  bad.ldc = 3;
  EXPECT_EQ(GemmReference(bad).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard::kernels::cpu
