// The oneDNN matrix product against its scalar reference on fresh random
// inputs: odd sizes, every transpose combination, padded leading dimensions,
// FP32 / BF16 / mixed operands, overwrite and accumulate.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "worker/kernels/cpu/gemm.h"

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
