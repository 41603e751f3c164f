// The online-softmax attention's CPU twin (model/kernels/cpu/
// online_attention.h), which runs the CUDA kernels' row functions
// (model/kernels/online_softmax.h) over the same tiles, against the CPU
// attention reference (attention.h, which keeps the T x T probabilities) on
// fresh random inputs: sequences that end inside a tile, every head
// dimension the kernels are instantiated for, FP32 and BF16 qkv. The device
// kernels are compared with this twin in kernels_cuda_test (on a GPU).
//
// Tolerances (ExpectClose below: of the tensor's scale, plus 5x relative): in
// FP32 the two differ only in summation order and in when the exponentials
// are normalised, 2e-5. With BF16 qkv the reference rounds P, dY and dS to
// BF16 for its products and the twin does not: 2e-2. Over 500 random seeds
// the worst element used 0.28 of its tolerance in BF16 (dqkv) and 0.09 in
// FP32 (200 seeds); an absolute 2e-2 alone failed 1 seed in CI.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/bf16_bits.h"
#include "gtest/gtest.h"
#include "tests/support/expect_close.h"
#include "tests/support/test_seed.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/online_attention.h"

namespace zeroshard::kernels::cpu {
namespace {

class OnlineAttentionTest : public ::testing::Test {
 public:
  std::vector<float> Random(size_t n, float scale) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }

 protected:
  void SetUp() override {
    seed_ = zeroshard::testing::TestSeed();
    rng_.seed(seed_);
  }
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// Within tol of the tensor's scale (its largest magnitude, at least 1) plus
// 5 tol relative, element by element: the BF16 reference's roundings of P,
// dY and dS are relative to the operands of each product, so a small
// element of a sum of large terms moves by tol of the terms, not of itself.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 float tol, const char* what) {
  float scale = 1.0f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  zeroshard::testing::ExpectAllClose(got, want, tol * scale, 5 * tol, what,
                                     "online", "reference");
}

// Runs both on one shape and compares y, dqkv, and lse against the
// reference's probabilities (p_i0 = exp(s_i0 - lse_i) for the first key).
void Compare(OnlineAttentionTest* t, const AttentionShape& s, float tol) {
  SCOPED_TRACE(::testing::Message()
               << "B=" << s.batch << " T=" << s.seq << " C=" << s.width
               << " H=" << s.heads << " " << DTypeName(s.dtype));
  const int64_t B = s.batch, T = s.seq, C = s.width, H = s.heads;
  // Scores of a few units, so the softmax is neither flat nor one-hot.
  std::vector<float> qkv32 = t->Random(B * T * 3 * C, 1.5f);
  std::vector<uint16_t> qkv16(qkv32.size());
  const void* qkv = qkv32.data();
  if (s.dtype == DType::kBf16) {
    for (size_t i = 0; i < qkv32.size(); ++i) {
      qkv16[i] = FloatToBf16Bits(qkv32[i]);
      qkv32[i] = Bf16BitsToFloat(qkv16[i]);
    }
    qkv = qkv16.data();
  }
  const std::vector<float> dy = t->Random(B * T * C, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();

  std::vector<float> probs32(s.dtype == DType::kFp32 ? B * H * T * T : 0);
  std::vector<uint16_t> probs16(s.dtype == DType::kBf16 ? B * H * T * T : 0);
  void* probs = s.dtype == DType::kFp32 ? static_cast<void*>(probs32.data())
                                        : static_cast<void*>(probs16.data());
  std::vector<float> y_ref(B * T * C), dqkv_ref(B * T * 3 * C);
  ASSERT_TRUE(AttentionForwardReference(s, qkv, probs, y_ref.data()).ok());
  ASSERT_TRUE(AttentionBackwardReference(s, qkv, probs, dy.data(),
                                         dqkv_ref.data())
                  .ok());

  std::vector<float> y(B * T * C, nan), lse(B * H * T, nan),
      dqkv(B * T * 3 * C, nan);
  ASSERT_TRUE(OnlineAttentionForwardTwin(s, qkv, lse.data(), y.data()).ok());
  ASSERT_TRUE(OnlineAttentionBackwardTwin(s, qkv, lse.data(), y.data(),
                                          dy.data(), dqkv.data())
                  .ok());
  ExpectClose(y, y_ref, tol, "y");
  ExpectClose(dqkv, dqkv_ref, tol, "dqkv");

  // lse through the reference's probability of key 0 (never masked).
  const int64_t hd = C / H;
  std::vector<float> p0(B * H * T), p0_ref(B * H * T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv32.data() + (b * T + i) * 3 * C + h * hd;
        const float* k = qkv32.data() + (b * T) * 3 * C + C + h * hd;
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double{q[d]} * k[d];
        const int64_t r = (b * H + h) * T + i;
        p0[r] = static_cast<float>(
            std::exp(dot / std::sqrt(static_cast<double>(hd)) - lse[r]));
        const int64_t at = r * T;
        p0_ref[r] = s.dtype == DType::kFp32 ? probs32[at]
                                            : Bf16BitsToFloat(probs16[at]);
      }
    }
  }
  ExpectClose(p0, p0_ref, tol, "p(key 0) from lse");
}

TEST_F(OnlineAttentionTest, Fp32MatchesTheReferenceForEveryHeadDimension) {
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed_));
  // hd 64 (GPT-2), 32, 16, 128; T ends inside a tile, spans several, or is 1.
  Compare(this, {2, 67, 128, 2, DType::kFp32}, 2e-5f);
  Compare(this, {1, 45, 64, 2, DType::kFp32}, 2e-5f);
  Compare(this, {2, 33, 64, 4, DType::kFp32}, 2e-5f);
  Compare(this, {1, 40, 128, 1, DType::kFp32}, 2e-5f);
  Compare(this, {3, 1, 128, 2, DType::kFp32}, 2e-5f);
}

TEST_F(OnlineAttentionTest, Bf16QkvMatchesTheReference) {
  SCOPED_TRACE(zeroshard::testing::SeedTrace(seed_));
  Compare(this, {2, 70, 128, 2, DType::kBf16}, 2e-2f);
}

TEST_F(OnlineAttentionTest, BadShapesAndBuffersAreRefused) {
  std::vector<float> qkv(3 * 96 * 4), lse(8), y(96 * 4), dy(96 * 4),
      dqkv(3 * 96 * 4);
  // hd = 48 is not instantiated.
  AttentionShape odd{1, 4, 96, 2, DType::kFp32};
  absl::Status st = OnlineAttentionForwardTwin(odd, qkv.data(), lse.data(),
                                               y.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("head dimension 48"), absl::string_view::npos);
  AttentionShape ok{1, 4, 64, 2, DType::kFp32};
  EXPECT_EQ(OnlineAttentionForwardTwin(ok, nullptr, lse.data(), y.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OnlineAttentionBackwardTwin(ok, qkv.data(), lse.data(), y.data(),
                                        nullptr, dqkv.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  AttentionShape fp16{1, 4, 64, 2, DType::kFp16};
  EXPECT_EQ(OnlineAttentionForwardTwin(fp16, qkv.data(), lse.data(), y.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  AttentionShape empty{1, 0, 64, 2, DType::kFp32};
  EXPECT_EQ(OnlineAttentionForwardTwin(empty, qkv.data(), lse.data(), y.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard::kernels::cpu
