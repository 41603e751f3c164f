// AdamW / Adam with 8-bit block-wise state (optim/adam8bit.h): bit for bit
// against torch's AdamW with its state quantized between steps
// (tests/fixtures/make_adam8bit_golden.py), a perturbed hyperparameter
// caught, and refusals that change nothing.
#include "optim/adam8bit.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_json.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace adam8bit_test {
namespace {

uint32_t Bits(float f) { return FloatBits(f); }

std::vector<float> Floats(const nlohmann::json& bits) {
  return testing::GoldenFloats(bits);
}

struct State {
  std::vector<float> master;
  std::vector<uint8_t> m, v;
  std::vector<float> m_absmax, v_absmax;
  std::vector<uint16_t> mirror;
  size_t block = kQuant8Block;

  State(std::vector<float> p, size_t block_size)
      : master(std::move(p)),
        m(master.size(), ZeroCode(Quant8Map::kSigned)),
        v(master.size(), ZeroCode(Quant8Map::kUnsigned)),
        m_absmax(Quant8Blocks(master.size(), block_size), 0.0f),
        v_absmax(Quant8Blocks(master.size(), block_size), 0.0f),
        mirror(master.size(), 0),
        block(block_size) {}

  Adam8bitSlice Slice() {
    return {.master = master.data(), .exp_avg = m.data(),
            .exp_avg_absmax = m_absmax.data(), .exp_avg_sq = v.data(),
            .exp_avg_sq_absmax = v_absmax.data(), .mirror = mirror.data(),
            .n = master.size(), .block = block};
  }
  bool operator==(const State& o) const {
    return std::memcmp(master.data(), o.master.data(), master.size() * 4) ==
               0 &&
           m == o.m && v == o.v && m_absmax == o.m_absmax &&
           v_absmax == o.v_absmax && mirror == o.mirror;
  }
};

// Replays every golden case (with `perturb` applied to its config) and
// returns the number of parameters and state codes or scales that differ
// from torch's, or -1 when the fixture is missing.
int64_t ReplayGolden(void (*perturb)(OptimizerConfig*) = nullptr) {
  std::ifstream in("tests/fixtures/adam8bit_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/adam8bit_golden.json not found; "
                            "tests run from the repo root";
  if (!in.good()) return -1;
  const nlohmann::json golden = nlohmann::json::parse(in);
  int64_t differ = 0;
  int cases = 0;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    OptimizerConfig config =
        testing::GoldenOptimizerConfig(c, OptimizerKind::kAdamW);
    if (perturb != nullptr) perturb(&config);
    EXPECT_TRUE(ValidateOptimizerConfig(config).ok());
    const float coef = c.at("coefficient").get<double>();
    const bool bf16 = c.at("grad_dtype") == "bf16";
    State s(Floats(c.at("param0")), c.at("block").get<size_t>());
    uint64_t t = 0;
    for (const auto& g : c.at("grads")) {
      ++t;
      std::vector<float> g32;
      std::vector<uint16_t> g16;
      GradView grad;
      if (bf16) {
        g16 = g.get<std::vector<uint16_t>>();
        grad = GradView::Bf16(g16.data());
      } else {
        g32 = Floats(g);
        grad = GradView::Fp32(g32.data());
      }
      const absl::Status st =
          Adam8bitUpdateReference(MakeAdamStep(config, t, coef), grad, s.Slice());
      EXPECT_TRUE(st.ok()) << st;
    }
    const std::vector<float> p = Floats(c.at("param"));
    const std::vector<float> am = Floats(c.at("exp_avg_absmax"));
    const std::vector<float> av = Floats(c.at("exp_avg_sq_absmax"));
    EXPECT_EQ(p.size(), s.master.size());
    EXPECT_EQ(am.size(), s.m_absmax.size());
    if (p.size() != s.master.size() || am.size() != s.m_absmax.size()) return -1;
    for (size_t i = 0; i < p.size(); ++i) {
      differ += Bits(p[i]) != Bits(s.master[i]) ? 1 : 0;
      differ += c.at("exp_avg")[i].get<int>() != s.m[i] ? 1 : 0;
      differ += c.at("exp_avg_sq")[i].get<int>() != s.v[i] ? 1 : 0;
      EXPECT_EQ(s.mirror[i], FloatToBf16(s.master[i]));
    }
    for (size_t b = 0; b < am.size(); ++b) {
      differ += Bits(am[b]) != Bits(s.m_absmax[b]) ? 1 : 0;
      differ += Bits(av[b]) != Bits(s.v_absmax[b]) ? 1 : 0;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 4);
  return differ;
}

TEST(Adam8bitTest, EqualsTorchWithQuantizedStateBitForBit) {
  EXPECT_EQ(ReplayGolden(), 0);
}

// The controls: each perturbed hyperparameter is caught.
TEST(Adam8bitTest, APerturbedHyperparameterIsCaught) {
  EXPECT_GT(ReplayGolden([](OptimizerConfig* c) { c->beta2 = 0.99 * c->beta2; }),
            0);
  EXPECT_GT(ReplayGolden([](OptimizerConfig* c) { c->lr *= 1.01; }), 0);
  EXPECT_GT(ReplayGolden([](OptimizerConfig* c) { c->eps *= 4; }), 0);
}

// A refusal changes nothing: a missing array, block 0, or a gradient that
// would leave a non-finite state.
TEST(Adam8bitTest, RefusalsChangeNothing) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const size_t n = 300;
  std::vector<float> p(n), g(n);
  for (float& x : p) x = normal(rng);
  for (float& x : g) x = normal(rng);
  OptimizerConfig config;
  config.kind = OptimizerKind::kAdamW;
  State s(p, 64);
  // Two real steps first, so the state is not all zeros.
  for (uint64_t t = 1; t <= 2; ++t) {
    ASSERT_TRUE(Adam8bitUpdateReference(MakeAdamStep(config, t, 1.0f),
                                        GradView::Fp32(g.data()), s.Slice())
                    .ok());
  }
  const State before = s;
  const AdamStep step = MakeAdamStep(config, 3, 1.0f);
  Adam8bitSlice bad = s.Slice();
  bad.exp_avg_sq_absmax = nullptr;
  EXPECT_TRUE(absl::IsInvalidArgument(
      Adam8bitUpdateReference(step, GradView::Fp32(g.data()), bad)));
  bad = s.Slice();
  bad.block = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(
      Adam8bitUpdateReference(step, GradView::Fp32(g.data()), bad)));
  EXPECT_TRUE(s == before);
  for (const float x : {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(), 3e38f}) {
    std::vector<float> g2 = g;
    g2[200] = x;  // 3e38: finite, but its square overflows v
    const absl::Status st =
        Adam8bitUpdateReference(step, GradView::Fp32(g2.data()), s.Slice());
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find("element 200"), std::string::npos) << st;
    EXPECT_TRUE(s == before) << "a refused step changed the state";
  }
  // The same step with the good gradient goes through.
  EXPECT_TRUE(Adam8bitUpdateReference(step, GradView::Fp32(g.data()),
                                      s.Slice())
                  .ok());
  EXPECT_FALSE(s == before);
}

// The servers' step (several parts, each with its own step, applied
// block by block at once) against the reference composed by hand: the
// state dequantized, AdamUpdateReference on each part, quantized back. One
// part over the slice is Adam8bitUpdateReference bit for bit.
TEST(Adam8bitTest, PartsEqualTheReferenceComposedByHand) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const size_t n = 3 * kQuant8Block + 333;
  std::vector<float> p(n), g(n);
  std::vector<uint16_t> g16(n);
  for (float& x : p) x = normal(rng);
  OptimizerConfig config;
  config.kind = OptimizerKind::kAdamW;
  config.lr = 1e-2;
  // Cuts inside blocks: parameter groups with other weight decay and lr.
  const std::vector<size_t> cuts = {0, 700, 2048, 2100, 5000, n};
  State fast(p, kQuant8Block), ref(p, kQuant8Block);
  std::vector<float> master(n), m(n), v(n);
  for (uint64_t t = 1; t <= 4; ++t) {
    const bool bf16 = t % 2 == 0;
    for (size_t i = 0; i < n; ++i) {
      g[i] = normal(rng) * (i % 3 == 0 ? 1e-3f : 1.0f);
      g16[i] = FloatToBf16(g[i]);
    }
    std::vector<Adam8bitPart> parts;
    // Step 3 is Adam with its L2 term, which the gradient does not bound:
    // the kernel saves each block first (as for a refusal), and must
    // still equal the reference.
    config.kind = t == 3 ? OptimizerKind::kAdam : OptimizerKind::kAdamW;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const AdamStep step = MakeAdamStep(config, t, 0.5f, k % 2 == 0 ? 0.1 : 0.0,
                                         k == 3 ? 0.25 : 1.0);
      const GradView grad = bf16 ? GradView::Bf16(g16.data() + cuts[k])
                                 : GradView::Fp32(g.data() + cuts[k]);
      parts.push_back({step, grad, cuts[k], cuts[k + 1] - cuts[k]});
    }
    ASSERT_TRUE(Adam8bitUpdateParts(parts, fast.Slice()).ok());
    // By hand.
    master = ref.master;
    ASSERT_TRUE(DequantizeBlockwiseReference(ref.m, ref.m_absmax, kQuant8Block,
                                             Quant8Map::kSigned, absl::MakeSpan(m)).ok());
    ASSERT_TRUE(DequantizeBlockwiseReference(ref.v, ref.v_absmax, kQuant8Block,
                                             Quant8Map::kUnsigned, absl::MakeSpan(v)).ok());
    for (const Adam8bitPart& part : parts) {
      AdamUpdateReference(part.step, part.grad,
                          {.master = master.data() + part.offset,
                           .exp_avg = m.data() + part.offset,
                           .exp_avg_sq = v.data() + part.offset,
                           .mirror = nullptr, .n = part.n});
    }
    ASSERT_TRUE(QuantizeBlockwiseReference(m, kQuant8Block, Quant8Map::kSigned,
                                           absl::MakeSpan(ref.m), absl::MakeSpan(ref.m_absmax)).ok());
    ASSERT_TRUE(QuantizeBlockwiseReference(v, kQuant8Block, Quant8Map::kUnsigned,
                                           absl::MakeSpan(ref.v), absl::MakeSpan(ref.v_absmax)).ok());
    ref.master = master;
    FloatToBf16Array(ref.master.data(), ref.mirror.data(), n);
    ASSERT_TRUE(fast == ref) << "step " << t;
  }
  // One part: the reference itself.
  State one = fast;
  const AdamStep step = MakeAdamStep(config, 5, 1.0f);
  const Adam8bitPart whole{step, GradView::Fp32(g.data()), 0, n};
  ASSERT_TRUE(Adam8bitUpdateParts({&whole, 1}, one.Slice()).ok());
  ASSERT_TRUE(Adam8bitUpdateReference(step, GradView::Fp32(g.data()), fast.Slice()).ok());
  EXPECT_TRUE(one == fast);
  // The control: another beta2 in one part is seen.
  State other = fast;
  OptimizerConfig changed = config;
  changed.beta2 = 0.99;
  const Adam8bitPart moved{MakeAdamStep(changed, 6, 1.0f), GradView::Fp32(g.data()), 0, n};
  const Adam8bitPart same{MakeAdamStep(config, 6, 1.0f), GradView::Fp32(g.data()), 0, n};
  ASSERT_TRUE(Adam8bitUpdateParts({&moved, 1}, other.Slice()).ok());
  ASSERT_TRUE(Adam8bitUpdateParts({&same, 1}, fast.Slice()).ok());
  EXPECT_FALSE(other == fast);
}

// One part over many blocks, as the servers' chunks mostly are: equal to
// the reference bit for bit, also
// across a block whose m and v are all zero (its codes are the zero's) and
// a short last block, for FP32 and BF16 gradients and fresh random inputs.
TEST(Adam8bitTest, OnePartOverManyBlocksEqualsTheReference) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const size_t n = 5 * kQuant8Block + 17;
  std::vector<float> p(n), g(n);
  std::vector<uint16_t> g16(n);
  for (float& x : p) x = normal(rng);
  OptimizerConfig config;
  config.kind = OptimizerKind::kAdamW;
  config.lr = 1e-2;
  State fast(p, kQuant8Block), ref(p, kQuant8Block);
  for (uint64_t t = 1; t <= 3; ++t) {
    for (size_t i = 0; i < n; ++i) {
      // Block 2's gradient is zero at the first step: its m and v stay 0.
      const bool zero = t == 1 && i / kQuant8Block == 2;
      g[i] = zero ? 0.0f : normal(rng) * (i % 5 == 0 ? 1e-4f : 1.0f);
      g16[i] = FloatToBf16(g[i]);
    }
    const GradView grad = t == 2 ? GradView::Bf16(g16.data())
                                 : GradView::Fp32(g.data());
    const AdamStep step = MakeAdamStep(config, t, 0.75f, 0.1, 1.0);
    const Adam8bitPart whole{step, grad, 0, n};
    ASSERT_TRUE(Adam8bitUpdateParts({&whole, 1}, fast.Slice()).ok());
    ASSERT_TRUE(Adam8bitUpdateReference(step, grad, ref.Slice()).ok());
    if (t == 1) {
      EXPECT_EQ(fast.m_absmax[2], 0.0f);
      EXPECT_EQ(fast.m[2 * kQuant8Block], ZeroCode(Quant8Map::kSigned));
    }
    ASSERT_TRUE(fast == ref) << "step " << t;
  }
}

// Parts that do not tile the slice, and a state that would not be finite,
// are refused without a change.
TEST(Adam8bitTest, PartsThatDoNotTileTheSliceAreRefused) {
  const size_t n = 4096;
  std::vector<float> p(n, 0.5f), g(n, 0.25f);
  State s(p, kQuant8Block);
  const State before = s;
  OptimizerConfig config;
  const AdamStep step = MakeAdamStep(config, 1, 1.0f);
  const Adam8bitPart gap[] = {{step, GradView::Fp32(g.data()), 0, 100},
                              {step, GradView::Fp32(g.data()), 200, n - 200}};
  EXPECT_TRUE(absl::IsInvalidArgument(Adam8bitUpdateParts(gap, s.Slice())));
  const Adam8bitPart short_one{step, GradView::Fp32(g.data()), 0, n - 1};
  EXPECT_TRUE(absl::IsInvalidArgument(Adam8bitUpdateParts({&short_one, 1}, s.Slice())));
  g[4000] = 3e38f;
  const Adam8bitPart overflow{step, GradView::Fp32(g.data()), 0, n};
  const absl::Status st = Adam8bitUpdateParts({&overflow, 1}, s.Slice());
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("element 4000"), std::string::npos) << st;
  EXPECT_TRUE(s == before);
}

}  // namespace
}  // namespace adam8bit_test
}  // namespace zeroshard
