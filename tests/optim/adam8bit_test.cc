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

}  // namespace
}  // namespace adam8bit_test
}  // namespace zeroshard
