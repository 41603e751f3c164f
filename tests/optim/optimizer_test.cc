// Tests of the Adam update: every SIMD kernel against the scalar reference on
// fresh random inputs, the thread pool against a single-threaded run, and the
// reference against golden values from torch.optim (tests/fixtures).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_json.h"
#include "optim/optimizer.h"
#include "optim/optimizer_kernels.h"
#include "optim/optimizer_pool.h"

namespace zeroshard {
namespace {

// A slice's state and gradient, owned.
struct State {
  std::vector<float> master, m, v;
  std::vector<uint16_t> mirror;
  std::vector<float> grad32;
  std::vector<uint16_t> grad16;

  AdamSlice Slice() {
    return {master.data(), m.data(), v.data(), mirror.data(), master.size()};
  }
  GradView Grad(bool bf16) const {
    return bf16 ? GradView::Bf16(grad16.data()) : GradView::Fp32(grad32.data());
  }
};

State RandomState(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale_exp(-6.0f, 2.0f);
  State s;
  s.master.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  s.mirror.assign(n, 0xDEAD);
  s.grad32.resize(n);
  s.grad16.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.master[i] = normal(rng);
    s.m[i] = 0.1f * normal(rng);
    const float sd = normal(rng) * 0.01f;
    s.v[i] = sd * sd;
    s.grad32[i] = normal(rng) * std::pow(10.0f, scale_exp(rng));
    s.grad16[i] = FloatToBf16(s.grad32[i]);
  }
  if (n > 2) {
    s.grad32[0] = 0.0f;   // zero gradient with zero-ish state is legal
    s.grad16[1] = 0x8000; // -0 in BF16
  }
  return s;
}

uint32_t Bits(float f) { return FloatBits(f); }

// Compares two states element by element, bit for bit.
void ExpectSameBits(const State& want, const State& got, const std::string& what,
                    bool nan_equal = false) {
  ASSERT_EQ(want.master.size(), got.master.size());
  int reported = 0;
  for (size_t i = 0; i < want.master.size() && reported < 5; ++i) {
    auto same = [&](float a, float b) {
      return Bits(a) == Bits(b) || (nan_equal && std::isnan(a) && std::isnan(b));
    };
    const bool ok = same(want.master[i], got.master[i]) &&
                    same(want.m[i], got.m[i]) && same(want.v[i], got.v[i]) &&
                    (want.mirror[i] == got.mirror[i] ||
                     (nan_equal && std::isnan(Bf16ToFloat(want.mirror[i])) &&
                      std::isnan(Bf16ToFloat(got.mirror[i]))));
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << " element " << i << ": master "
                    << want.master[i] << " vs " << got.master[i] << ", m "
                    << want.m[i] << " vs " << got.m[i] << ", v " << want.v[i]
                    << " vs " << got.v[i] << ", mirror " << want.mirror[i]
                    << " vs " << got.mirror[i];
    }
  }
}

void ExpectMirrorIsRounding(const State& s, const std::string& what) {
  for (size_t i = 0; i < s.master.size(); ++i) {
    ASSERT_EQ(s.mirror[i], FloatToBf16(s.master[i]))
        << what << " element " << i << " master bits " << std::hex
        << Bits(s.master[i]);
  }
}

OptimizerConfig Config(OptimizerKind kind, double weight_decay) {
  OptimizerConfig c;
  c.kind = kind;
  c.lr = 1e-3;
  c.weight_decay = weight_decay;
  return c;
}

TEST(AdamKernelTest, ScalarIsAlwaysAvailable) {
  const std::vector<AdamKernel> kernels = AvailableAdamKernels();
  ASSERT_FALSE(kernels.empty());
  EXPECT_EQ(kernels.back().name, "scalar");
  EXPECT_EQ(kernels.back().fn, &AdamUpdateReference);
  EXPECT_FALSE(AdamKernelName().empty());
  std::printf("kernels available:");
  for (const AdamKernel& k : kernels) std::printf(" %s", std::string(k.name).c_str());
  std::printf("; AdamUpdate uses %s\n", std::string(AdamKernelName()).c_str());
}

TEST(AdamKernelTest, EveryKernelMatchesReferenceBitForBit) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const size_t lengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 47, 100, 257, 1023, 4099};
  struct Variant {
    OptimizerKind kind;
    double wd;
  };
  const Variant variants[] = {{OptimizerKind::kAdamW, 0.01},
                              {OptimizerKind::kAdamW, 0.0},
                              {OptimizerKind::kAdam, 0.05},
                              {OptimizerKind::kAdam, 0.0}};
  const uint64_t steps[] = {1, 2, 10, 1000};
  const float coefficients[] = {1.0f, 0.37f};
  int checked = 0;
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    for (size_t n : lengths) {
      for (const Variant& var : variants) {
        for (uint64_t t : steps) {
          for (float coef : coefficients) {
            for (bool bf16 : {false, true}) {
              const State fresh = RandomState(n, rng);
              const AdamStep step = MakeAdamStep(Config(var.kind, var.wd), t, coef);
              State want = fresh, got = fresh;
              AdamUpdateReference(step, want.Grad(bf16), want.Slice());
              kernel.fn(step, got.Grad(bf16), got.Slice());
              std::ostringstream what;
              what << kernel.name << " n=" << n << " kind=" << int(var.kind)
                   << " wd=" << var.wd << " t=" << t << " coef=" << coef
                   << " bf16=" << bf16;
              ExpectSameBits(want, got, what.str());
              ExpectMirrorIsRounding(got, what.str());
              if (HasFailure()) return;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Long slices take the prefetching, mirror-streaming path where the mirror is
// 32-byte aligned, and the plain one where it is not.
TEST(AdamKernelTest, LongSlicesWithAlignedAndUnalignedMirror) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 50001;
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    for (size_t shift : {0, 1, 8}) {
      State want = RandomState(n, rng), got = want;
      const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.01), 5, 1.0f);
      AdamUpdateReference(step, want.Grad(true), want.Slice());
      std::vector<uint16_t> buffer(n + 64, 0);
      uint16_t* mirror = buffer.data();
      while (reinterpret_cast<uintptr_t>(mirror) % 64 != 0) ++mirror;
      mirror += shift;
      AdamSlice s = got.Slice();
      s.mirror = mirror;
      kernel.fn(step, got.Grad(true), s);
      std::copy(mirror, mirror + n, got.mirror.begin());
      ExpectSameBits(want, got, std::string(kernel.name) + " shift " + std::to_string(shift));
    }
  }
}

// Received gradients may sit at any byte address: every kernel, the
// reference included, reads them there and gives the bits it gives for an
// aligned copy.
TEST(AdamKernelTest, GradientAtAnOddAddress) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 1037;
  for (bool bf16 : {false, true}) {
    State want = RandomState(n, rng);
    const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.01), 4, 0.5f);
    const size_t bytes = n * (bf16 ? 2 : 4);
    const void* aligned = want.Grad(bf16).data;
    std::vector<char> buffer(bytes + 1);
    std::memcpy(buffer.data() + 1, aligned, bytes);
    const GradView odd{buffer.data() + 1, bf16};
    State got_ref = want;
    AdamUpdateReference(step, odd, got_ref.Slice());
    for (const AdamKernel& kernel : AvailableAdamKernels()) {
      State got = want;
      kernel.fn(step, odd, got.Slice());
      ExpectSameBits(got_ref, got, std::string(kernel.name) + (bf16 ? " bf16" : " fp32"));
    }
    AdamUpdateReference(step, want.Grad(bf16), want.Slice());
    ExpectSameBits(want, got_ref, bf16 ? "reference bf16" : "reference fp32");
  }
}

TEST(AdamKernelTest, NullMirrorIsNotWritten) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    State want = RandomState(37, rng), got = want;
    const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.01), 3, 1.0f);
    AdamSlice ws = want.Slice(), gs = got.Slice();
    ws.mirror = nullptr;
    gs.mirror = nullptr;
    AdamUpdateReference(step, want.Grad(false), ws);
    kernel.fn(step, got.Grad(false), gs);
    ExpectSameBits(want, got, std::string(kernel.name));
    for (uint16_t b : got.mirror) ASSERT_EQ(b, 0xDEAD) << kernel.name;
  }
}

// With zero gradient and zero moments, AdamW without decay leaves the master
// unchanged, so the mirror sees arbitrary bit patterns: ties, subnormals,
// infinities, signalling and quiet NaNs.
TEST(AdamKernelTest, MirrorRoundsLikeFloatToBf16OnEveryBitPattern) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> patterns = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00008000u,
      0x00018000u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x7F7FFFFFu,
      0x7F7F8000u, 0xFF7F8000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
      0x7F800001u, 0xFF800001u, 0x7FBFFFFFu, 0x7FFFFFFFu, 0x00800000u};
  for (int i = 0; i < 3000; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    State s;
    const size_t n = patterns.size();
    s.master.resize(n);
    for (size_t i = 0; i < n; ++i) s.master[i] = BitsToFloat(patterns[i]);
    s.m.assign(n, 0.0f);
    s.v.assign(n, 0.0f);
    s.mirror.assign(n, 0);
    s.grad32.assign(n, 0.0f);
    State want = s;
    const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.0), 1, 1.0f);
    kernel.fn(step, s.Grad(false), s.Slice());
    AdamUpdateReference(step, want.Grad(false), want.Slice());
    for (size_t i = 0; i < n; ++i) {
      if (!std::isnan(want.master[i])) {
        ASSERT_EQ(Bits(s.master[i]), patterns[i]) << kernel.name << " " << i;
      }
    }
    ExpectMirrorIsRounding(s, std::string(kernel.name));
    ExpectSameBits(want, s, std::string(kernel.name));
  }
}

// Arbitrary bits everywhere (NaN and Inf in state and gradient): kernels and
// reference agree, NaN payloads aside.
TEST(AdamKernelTest, RandomBitsAgreeWithReference) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 2053;
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    for (bool bf16 : {false, true}) {
      State s = RandomState(n, rng);
      for (size_t i = 0; i < n; ++i) {
        if (i % 3 == 0) s.master[i] = BitsToFloat(static_cast<uint32_t>(rng()));
        if (i % 5 == 0) s.m[i] = BitsToFloat(static_cast<uint32_t>(rng()));
        if (i % 7 == 0) s.v[i] = BitsToFloat(static_cast<uint32_t>(rng()));
        if (i % 4 == 0) {
          s.grad32[i] = BitsToFloat(static_cast<uint32_t>(rng()));
          s.grad16[i] = static_cast<uint16_t>(rng());
        }
      }
      State want = s;
      const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdam, 0.02), 4, 0.5f);
      AdamUpdateReference(step, want.Grad(bf16), want.Slice());
      kernel.fn(step, s.Grad(bf16), s.Slice());
      ExpectSameBits(want, s, std::string(kernel.name), /*nan_equal=*/true);
      ExpectMirrorIsRounding(s, std::string(kernel.name));
    }
  }
}

TEST(MakeAdamStepTest, ConstantsFollowTorch) {
  OptimizerConfig c = Config(OptimizerKind::kAdamW, 0.1);
  c.lr = 0.01;
  const AdamStep s = MakeAdamStep(c, 3, 0.25f);
  const double bc1 = 1.0 - std::pow(0.9, 3.0);
  const double bc2 = 1.0 - std::pow(0.999, 3.0);
  EXPECT_EQ(s.bias_correction1, bc1);
  EXPECT_EQ(s.bias_correction2_sqrt, std::sqrt(bc2));
  EXPECT_EQ(s.bias_correction2_sqrt_f, static_cast<float>(std::sqrt(bc2)));
  EXPECT_EQ(s.neg_step_size, static_cast<float>(-(0.01 / bc1)));
  EXPECT_EQ(s.decay, static_cast<float>(1.0 - 0.01 * 0.1));
  EXPECT_EQ(s.one_minus_beta1, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(s.one_minus_beta2, static_cast<float>(1.0 - 0.999));
  EXPECT_EQ(s.coefficient, 0.25f);
  EXPECT_EQ(s.lr, 0.01f);
  // t == 0 is treated as the first step instead of dividing by zero.
  const AdamStep s0 = MakeAdamStep(c, 0, 1.0f);
  const AdamStep s1 = MakeAdamStep(c, 1, 1.0f);
  EXPECT_EQ(s0.neg_step_size, s1.neg_step_size);
  EXPECT_TRUE(std::isfinite(s0.neg_step_size));
  // The schedule feeds lr.
  c.schedule = LrScheduleKind::kWarmupCosine;
  c.warmup_steps = 4;
  c.total_steps = 10;
  EXPECT_EQ(MakeAdamStep(c, 2, 1.0f).lr, static_cast<float>(0.005));
}

TEST(OptimizerPoolTest, EveryTileRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    OptimizerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{999}, size_t{100003}}) {
      for (size_t tile : {size_t{1}, size_t{64}, size_t{4096}}) {
        if (tile == 1 && n > 1000) continue;
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, tile, [&](size_t lo, size_t hi) {
          ASSERT_LE(lo, hi);
          ASSERT_LE(hi, n);
          ASSERT_LE(hi - lo, tile);
          for (size_t i = lo; i < hi; ++i) hits[i].fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n
                                       << " tile=" << tile << " i=" << i;
        }
      }
    }
  }
}

TEST(OptimizerPoolTest, ConcurrentCallersEachCompleteTheirLoop) {
  OptimizerPool pool(3);
  constexpr size_t kN = 50000;
  std::vector<std::vector<int>> hits(4, std::vector<int>(kN, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 20; ++rep) {
        pool.ParallelFor(kN, 1000, [&](size_t lo, size_t hi) {
          for (size_t i = lo; i < hi; ++i) ++hits[c][i];
        });
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < 4; ++c) {
    for (size_t i = 0; i < kN; ++i) ASSERT_EQ(hits[c][i], 20) << c << " " << i;
  }
}

TEST(OptimizerPoolTest, TiledKernelMatchesSingleCall) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const size_t n = 200003;
  const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdamW, 0.01), 7, 0.5f);
  OptimizerPool pool(3);
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    for (bool bf16 : {false, true}) {
      State want = RandomState(n, rng), got = want;
      kernel.fn(step, want.Grad(bf16), want.Slice());
      const AdamSlice s = got.Slice();
      pool.ParallelFor(n, 4096 + 16, [&](size_t lo, size_t hi) {
        const GradView g = bf16 ? GradView::Bf16(got.grad16.data() + lo)
                                : GradView::Fp32(got.grad32.data() + lo);
        kernel.fn(step, g,
                  {s.master + lo, s.exp_avg + lo, s.exp_avg_sq + lo,
                   s.mirror + lo, hi - lo});
      });
      ExpectSameBits(want, got, std::string(kernel.name) + " tiled");
    }
  }
}

TEST(AdamUpdateTest, LargeSliceMatchesReference) {
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (size_t n : {size_t{1000}, size_t{300007}}) {
    for (bool bf16 : {false, true}) {
      State want = RandomState(n, rng), got = want;
      const AdamStep step = MakeAdamStep(Config(OptimizerKind::kAdam, 0.01), 2, 1.0f);
      AdamUpdateReference(step, want.Grad(bf16), want.Slice());
      AdamUpdate(step, got.Grad(bf16), got.Slice());
      ExpectSameBits(want, got, "AdamUpdate n=" + std::to_string(n));
    }
  }
}

// ---- Golden values from torch.optim (tests/fixtures/make_adamw_golden.py).

int64_t UlpDistance(float a, float b) {
  auto key = [](float f) -> int64_t {
    const int32_t i = static_cast<int32_t>(FloatBits(f));
    return i < 0 ? -static_cast<int64_t>(i & 0x7FFFFFFF) : i;
  };
  return std::llabs(key(a) - key(b));
}

std::vector<float> Floats(const nlohmann::json& bits) {
  return testing::GoldenFloats(bits);
}

// Applies every step of every golden case with `update` and returns the
// largest ULP distance seen from torch's values.
int64_t ReplayGolden(void (*update)(const AdamStep&, GradView, const AdamSlice&)) {
  std::ifstream in("tests/fixtures/adamw_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/adamw_golden.json not found; tests "
                            "run from the repo root";
  if (!in.good()) return -1;
  const nlohmann::json golden = nlohmann::json::parse(in);
  int64_t worst = 0;
  int cases = 0;
  for (const auto& c : golden.at("cases")) {
    const OptimizerConfig config =
        testing::GoldenOptimizerConfig(c, OptimizerKind::kAdamW);
    EXPECT_TRUE(ValidateOptimizerConfig(config).ok());
    const float coef = c.at("coefficient").get<double>();
    const bool bf16 = c.at("grad_dtype") == "bf16";
    const size_t n = c.at("n");
    State s;
    s.master = Floats(c.at("param0"));
    EXPECT_EQ(s.master.size(), n);
    if (s.master.size() != n) return -1;
    s.m.assign(n, 0.0f);
    s.v.assign(n, 0.0f);
    s.mirror.assign(n, 0);
    for (const auto& st : c.at("steps")) {
      const uint64_t t = st.at("t");
      if (bf16) {
        s.grad16 = st.at("grad").get<std::vector<uint16_t>>();
      } else {
        s.grad32 = Floats(st.at("grad"));
      }
      update(MakeAdamStep(config, t, coef), s.Grad(bf16), s.Slice());
      const std::vector<float> p = Floats(st.at("param"));
      const std::vector<float> m = Floats(st.at("exp_avg"));
      const std::vector<float> v = Floats(st.at("exp_avg_sq"));
      for (size_t i = 0; i < n; ++i) {
        worst = std::max({worst, UlpDistance(p[i], s.master[i]),
                          UlpDistance(m[i], s.m[i]), UlpDistance(v[i], s.v[i])});
        EXPECT_EQ(s.mirror[i], FloatToBf16(s.master[i]));
      }
      // Continue from torch's state so one difference does not compound.
      s.master = p;
      s.m = m;
      s.v = v;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 5);
  return worst;
}

// The reference reproduces torch 1.13's fp32 AdamW / Adam bit for bit on this
// CPU (torch's AVX2 kernels fuse exactly where the reference calls fma).
TEST(AdamGoldenTest, ReferenceMatchesTorchBitForBit) {
  const int64_t worst = ReplayGolden(&AdamUpdateReference);
  std::printf("reference vs torch: max %lld ULP\n", static_cast<long long>(worst));
  EXPECT_EQ(worst, 0);
}

TEST(AdamGoldenTest, FastPathMatchesTorchBitForBit) {
  const int64_t worst = ReplayGolden(&AdamUpdate);
  std::printf("AdamUpdate (%s) vs torch: max %lld ULP\n",
              std::string(AdamKernelName()).c_str(), static_cast<long long>(worst));
  EXPECT_EQ(worst, 0);
}

}  // namespace
}  // namespace zeroshard
