// Tests of the Lion rule (optim/lion.h): the reference and the fast path
// against golden values from the published update run in torch
// (tests/fixtures/make_lion_golden.py), the AVX-512 kernel against the
// reference on fresh random inputs, a perturbed hyperparameter caught, and
// the rule as the servers' store sees it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "optim/lion.h"
#include "tests/support/golden_json.h"
#include "optim/update_rule.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace lion_test {
namespace {

using UpdateFn = void (*)(const AdamStep&, GradView, const LionSlice&);

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::vector<float> Floats(const nlohmann::json& bits) {
  return testing::GoldenFloats(bits);
}

OptimizerConfig CaseConfig(const nlohmann::json& c) {
  return testing::GoldenOptimizerConfig(c, OptimizerKind::kLion);
}

// Replays every golden case with `update` (and `perturb` applied to each
// case's config); returns the number of elements whose bits differ from
// torch's, or -1 when the fixture is missing.
int64_t ReplayGolden(UpdateFn update,
                     void (*perturb)(OptimizerConfig*) = nullptr) {
  std::ifstream in("tests/fixtures/lion_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/lion_golden.json not found; tests "
                            "run from the repo root";
  if (!in.good()) return -1;
  const nlohmann::json golden = nlohmann::json::parse(in);
  int64_t differ = 0;
  int cases = 0;
  for (const auto& c : golden.at("cases")) {
    OptimizerConfig config = CaseConfig(c);
    if (perturb != nullptr) perturb(&config);
    EXPECT_TRUE(ValidateOptimizerConfig(config).ok());
    const float coef = static_cast<float>(c.at("coefficient").get<double>());
    const bool bf16 = c.at("grad_dtype") == "bf16";
    const size_t n = c.at("n");
    std::vector<float> master = Floats(c.at("param0"));
    std::vector<float> m(n, 0.0f);
    std::vector<uint16_t> mirror(n, 0);
    for (const auto& st : c.at("steps")) {
      const uint64_t t = st.at("t");
      std::vector<uint16_t> g16;
      std::vector<float> g32;
      GradView g;
      if (bf16) {
        g16 = st.at("grad").get<std::vector<uint16_t>>();
        g = GradView::Bf16(g16.data());
      } else {
        g32 = Floats(st.at("grad"));
        g = GradView::Fp32(g32.data());
      }
      update(MakeLionStep(config, t, coef, config.weight_decay, 1.0), g,
             {master.data(), m.data(), mirror.data(), n});
      const std::vector<float> want_p = Floats(st.at("param"));
      const std::vector<float> want_m = Floats(st.at("exp_avg"));
      for (size_t i = 0; i < n; ++i) {
        differ += Bits(want_p[i]) != Bits(master[i]);
        differ += Bits(want_m[i]) != Bits(m[i]);
        EXPECT_EQ(mirror[i], FloatToBf16(master[i]));
      }
      // Go on from torch's state, so one difference does not compound.
      master = want_p;
      m = want_m;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 4);
  return differ;
}

TEST(LionGoldenTest, ReferenceMatchesTorchBitForBit) {
  EXPECT_EQ(ReplayGolden(&LionUpdateReference), 0);
}

TEST(LionGoldenTest, FastPathMatchesTorchBitForBit) {
  std::printf("LionUpdate kernel: %s\n", std::string(LionKernelName()).c_str());
  EXPECT_EQ(ReplayGolden(&LionUpdate), 0);
}

// The comparison can fail: a slightly different beta2 (the momentum's
// decay, which only shows from the second step on) is caught.
TEST(LionGoldenTest, APerturbedHyperparameterIsCaught) {
  EXPECT_GT(ReplayGolden(&LionUpdateReference,
                         [](OptimizerConfig* c) { c->beta2 *= 1.0001; }),
            0);
  EXPECT_GT(ReplayGolden(&LionUpdateReference,
                         [](OptimizerConfig* c) { c->weight_decay += 0.05; }),
            0);
}

struct Arrays {
  std::vector<float> master, m, g32;
  std::vector<uint16_t> mirror, g16;
};

Arrays RandomArrays(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Arrays a;
  for (size_t i = 0; i < n; ++i) {
    a.master.push_back(normal(rng));
    a.m.push_back(0.1f * normal(rng));
    a.g32.push_back(normal(rng));
    a.g16.push_back(FloatToBf16(normal(rng)));
  }
  // Zeros, signed zeros and a momentum that cancels the gradient exactly.
  if (n > 4) {
    a.g32[0] = 0.0f;
    a.g32[1] = -0.0f;
    a.m[1] = 0.0f;
    a.m[2] = 0.0f;
    a.g32[2] = 0.0f;
  }
  a.mirror.assign(n, 0);
  return a;
}

TEST(LionKernelTest, Avx512EqualsTheReferenceOnRandomInputs) {
  if (LionKernelName() != "avx512") {
    GTEST_SKIP() << "no AVX-512 on this CPU: LionUpdate is the reference";
  }
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  OptimizerConfig config;
  config.kind = OptimizerKind::kLion;
  config.lr = 3e-4;
  config.beta1 = 0.9;
  config.beta2 = 0.99;
  for (size_t n : {1, 15, 16, 17, 255, 1000, 70001}) {
    for (bool bf16 : {false, true}) {
      for (double wd : {0.0, 0.1}) {
        const AdamStep step = MakeLionStep(config, 3, 0.5f, wd, 1.0);
        Arrays want = RandomArrays(rng, n);
        Arrays got = want;
        auto grad = [&](Arrays& a) {
          return bf16 ? GradView::Bf16(a.g16.data())
                      : GradView::Fp32(a.g32.data());
        };
        LionUpdateReference(step, grad(want),
                            {want.master.data(), want.m.data(),
                             want.mirror.data(), n});
        // The kernel directly, and LionUpdate (the pool's tiles above
        // 65536 elements).
        UpdateFn fn = n > 65536 ? &LionUpdate : &LionUpdateAvx512;
        fn(step, grad(got),
           {got.master.data(), got.m.data(), got.mirror.data(), n});
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(Bits(want.master[i]), Bits(got.master[i]))
              << "n=" << n << " bf16=" << bf16 << " wd=" << wd << " i=" << i;
          ASSERT_EQ(Bits(want.m[i]), Bits(got.m[i])) << "n=" << n << " i=" << i;
          ASSERT_EQ(want.mirror[i], got.mirror[i]) << "n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST(LionRuleTest, TheStoreSeesOneSlotAndNoDeviceKernel) {
  const UpdateRule& rule = UpdateRuleFor(OptimizerKind::kLion);
  EXPECT_EQ(rule.name(), "lion");
  ASSERT_EQ(rule.slots().size(), 1u);
  EXPECT_STREQ(rule.slots()[0].name, "exp_avg");
  EXPECT_EQ(rule.StateBytesPerElement(), 4u);
  EXPECT_EQ(OptimizerStateBytesPerElement(OptimizerKind::kLion), 4u);
  EXPECT_FALSE(rule.HasDeviceUpdate());
  EXPECT_EQ(rule.UpdateOnDevice({}, GradView::Fp32(nullptr), {}, nullptr).code(),
            absl::StatusCode::kUnimplemented);
  // Through the rule: the same bits as the reference.
  OptimizerConfig config;
  config.kind = OptimizerKind::kLion;
  config.lr = 1e-3;
  const AdamStep step = rule.MakeStep(config, 1, 1.0f, 0.01, 2.0);
  EXPECT_FLOAT_EQ(step.neg_step_size, -2e-3f);
  float p = 1.0f, m = 0.0f, g = -0.5f;
  StateSlice s;
  s.master = &p;
  s.slots[0] = &m;
  s.n = 1;
  ASSERT_TRUE(rule.Update(step, GradView::Fp32(&g), s).ok());
  // decay 1 - 2e-3 * 0.01, then + lr (sign of -0.05 is -1).
  EXPECT_EQ(Bits(p), Bits(std::fmaf(-1.0f, -2e-3f,
                                    1.0f * static_cast<float>(1.0 - 2e-5))));
  EXPECT_EQ(Bits(m), Bits(std::fmaf(
                         -0.5f, static_cast<float>(1.0 - config.beta2), 0.0f)));
}

}  // namespace
}  // namespace lion_test
}  // namespace zeroshard
