// Muon (optim/muon.h) and its Newton–Schulz iteration
// (optim/newton_schulz.h): the oneDNN path against the scalar reference on
// fresh random matrices, each step against torch's run of the published
// code (tests/fixtures/make_muon_golden.py) within 1e-5 relative, perturbed
// hyperparameters caught, bad input refused.
#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "optim/newton_schulz.h"
#include "tests/support/golden_json.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace muon_test {
namespace {

std::vector<float> Floats(const nlohmann::json& bits) {
  return testing::GoldenFloats(bits);
}

// ||a - b||_F / ||b||_F (b nonzero).
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / den);
}

TEST(NewtonSchulzTest, OneDnnEqualsTheReferenceOnRandomMatrices) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  NewtonSchulzScratch scratch;
  double worst = 0;
  for (int round = 0; round < 12; ++round) {
    const int64_t rows = 1 + rng() % 80, cols = 1 + rng() % 80;
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    std::vector<float> g(rows * cols), fast(g.size()), ref(g.size());
    for (float& x : g) x = normal(rng) * 0.01f;
    ASSERT_TRUE(NewtonSchulz5(g.data(), rows, cols, fast.data(), scratch).ok());
    ASSERT_TRUE(NewtonSchulz5Reference(g.data(), rows, cols, ref.data()).ok());
    const double e = RelativeError(fast, ref);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-5);
    // In place gives the same.
    std::vector<float> inplace = g;
    ASSERT_TRUE(NewtonSchulz5(inplace.data(), rows, cols, inplace.data(),
                              scratch)
                    .ok());
    EXPECT_EQ(inplace, fast);
  }
  std::printf("Newton-Schulz oneDNN vs reference: max relative error %.3g\n",
              worst);
  // A zero matrix stays zero.
  std::vector<float> zero(12, 0.0f), out(12, 1.0f);
  ASSERT_TRUE(NewtonSchulz5(zero.data(), 3, 4, out.data(), scratch).ok());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// What one golden step needs, and the replay of every step of every case
// from torch's state before it (so one difference does not compound).
struct Worst {
  double param = 0;     // relative error of the update p' - p
  double momentum = 0;  // relative error of the momentum
  int steps = 0;
};

Worst ReplayGolden(bool reference, void (*perturb)(double*, double*, bool*)) {
  Worst w;
  std::ifstream in("tests/fixtures/muon_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/muon_golden.json not found; tests "
                            "run from the repo root";
  if (!in.good()) return {1, 1, 0};
  const nlohmann::json golden = nlohmann::json::parse(in);
  NewtonSchulzScratch scratch;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const int64_t rows = c.at("rows"), cols = c.at("cols");
    double lr = c.at("lr"), momentum = c.at("momentum");
    bool nesterov = c.at("nesterov");
    if (perturb != nullptr) perturb(&lr, &momentum, &nesterov);
    const MuonStep step =
        MakeMuonStep(lr, momentum, c.at("weight_decay").get<double>(),
                     nesterov, c.at("coefficient").get<float>());
    const bool bf16 = c.at("grad_dtype") == "bf16";
    std::vector<float> p = Floats(c.at("param0"));
    std::vector<float> m(p.size(), 0.0f);
    for (const auto& st : c.at("steps")) {
      std::vector<float> g32;
      std::vector<uint16_t> g16;
      GradView grad;
      if (bf16) {
        g16 = st.at("grad").get<std::vector<uint16_t>>();
        grad = GradView::Bf16(g16.data());
      } else {
        g32 = Floats(st.at("grad"));
        grad = GradView::Fp32(g32.data());
      }
      std::vector<float> mine = p, mine_m = m;
      std::vector<uint16_t> mirror(p.size());
      EXPECT_TRUE(MuonUpdate(step, grad, rows, cols, mine.data(),
                             mine_m.data(), mirror.data(), scratch, reference)
                      .ok());
      const std::vector<float> want = Floats(st.at("param"));
      const std::vector<float> want_m = Floats(st.at("momentum"));
      std::vector<float> d_mine(p.size()), d_want(p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        d_mine[i] = mine[i] - p[i];
        d_want[i] = want[i] - p[i];
        EXPECT_EQ(mirror[i], FloatToBf16(mine[i]));
      }
      w.param = std::max(w.param, RelativeError(d_mine, d_want));
      w.momentum = std::max(w.momentum, RelativeError(mine_m, want_m));
      ++w.steps;
      p = want;
      m = want_m;
    }
  }
  return w;
}

TEST(MuonTest, EachStepIsWithin1e5OfTorch) {
  for (const bool reference : {false, true}) {
    const Worst w = ReplayGolden(reference, nullptr);
    std::printf("Muon (%s) vs torch over %d steps: update %.3g, momentum "
                "%.3g relative\n",
                reference ? "reference" : "oneDNN", w.steps, w.param,
                w.momentum);
    EXPECT_EQ(w.steps, 11);
    EXPECT_LE(w.param, 1e-5);
    EXPECT_LE(w.momentum, 1e-6);
  }
}

TEST(MuonTest, APerturbedHyperparameterIsCaught) {
  EXPECT_GT(ReplayGolden(false, [](double* lr, double*, bool*) {
              *lr *= 1.001;
            }).param,
            1e-4);
  EXPECT_GT(ReplayGolden(false, [](double*, double* mom, bool*) {
              *mom = 0.5 * (*mom + 1);
            }).param,
            1e-3);
  EXPECT_GT(ReplayGolden(false, [](double*, double*, bool* nesterov) {
              *nesterov = !*nesterov;
            }).param,
            1e-3);
}

TEST(MuonTest, BadInputIsRefusedAndChangesNothing) {
  std::vector<float> p(6, 1.0f), m(6, 2.0f), g(6, 0.5f);
  NewtonSchulzScratch scratch;
  const MuonStep step = MakeMuonStep(0.02, 0.95, 0.0, true, 1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(MuonUpdate(
      step, GradView::Fp32(g.data()), 0, 6, p.data(), m.data(), nullptr,
      scratch)));
  EXPECT_TRUE(absl::IsInvalidArgument(MuonUpdate(
      step, GradView::Fp32(g.data()), 2, 3, p.data(), nullptr, nullptr,
      scratch)));
  EXPECT_TRUE(absl::IsInvalidArgument(MuonUpdate(
      step, GradView::Fp32(nullptr), 2, 3, p.data(), m.data(), nullptr,
      scratch)));
  for (float x : p) EXPECT_EQ(x, 1.0f);
  for (float x : m) EXPECT_EQ(x, 2.0f);
  std::vector<float> out(6);
  EXPECT_TRUE(absl::IsInvalidArgument(
      NewtonSchulz5(g.data(), 2, -3, out.data(), scratch)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      NewtonSchulz5Reference(nullptr, 2, 3, out.data())));
}

}  // namespace
}  // namespace muon_test
}  // namespace zeroshard
