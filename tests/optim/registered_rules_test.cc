// The registered element-wise rules (common/optimizer_rules.h, their
// updates through optim/elementwise_rule.h) against torch's own optimizer
// classes (tests/fixtures/rules_golden.json, made by
// make_rules_golden.py): both kernels bit for bit, params and state; a
// perturbed param is caught; and for every rule of the registry the
// dispatched kernel equals its scalar reference on fresh random inputs.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/optimizer_rules.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "optim/update_rule.h"
#include "optim/whole_tensor_rule.h"
#include "tests/support/golden_json.h"
#include "tests/support/test_seed.h"

namespace zeroshard {
namespace registered_rules_test {
namespace {

using json = nlohmann::json;

struct Case {
  std::string name;
  OptimizerConfig config;
  float coefficient = 1;
  bool bf16 = false;
  json data;
};

std::vector<Case> LoadCases() {
  std::vector<Case> cases;
  std::ifstream in("tests/fixtures/rules_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/rules_golden.json not found; "
                            "tests run from the repo root";
  if (!in.good()) return cases;
  const json doc = json::parse(in);
  for (const json& c : doc.at("cases")) {
    Case k;
    k.name = c.at("name");
    const RuleInfo* rule = FindRule(c.at("rule").get<std::string>());
    EXPECT_NE(rule, nullptr) << k.name;
    if (rule == nullptr) continue;
    std::map<std::string, double> params;
    for (const auto& [key, v] : c.at("params").items()) {
      params[key] = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
    }
    absl::StatusOr<OptimizerConfig> config = MakeRuleConfig(*rule, params);
    EXPECT_TRUE(config.ok()) << k.name << ": " << config.status();
    if (!config.ok()) continue;
    k.config = *config;
    k.coefficient = c.at("coefficient").get<float>();
    k.bf16 = c.at("grad_dtype") == "bf16";
    k.data = c;
    cases.push_back(std::move(k));
  }
  EXPECT_EQ(cases.size(), 5u);
  return cases;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Replays a case through the rule's reference or its dispatched kernel;
// "" when every step's params, state and mirror equal torch's bits, else
// the first difference.
std::string Replay(const Case& c, bool reference) {
  absl::StatusOr<const UpdateRule*> found = UpdateRuleFor(c.config);
  if (!found.ok()) return std::string(found.status().message());
  const UpdateRule& rule = **found;
  std::vector<float> w = testing::GoldenFloats(c.data.at("param0"));
  const size_t n = w.size();
  std::vector<std::vector<float>> state(rule.slots().size(),
                                        std::vector<float>(n, 0.0f));
  std::vector<uint16_t> mirror(n, 0);
  for (const json& st : c.data.at("steps")) {
    const uint64_t t = st.at("t");
    std::vector<float> g32;
    std::vector<uint16_t> g16;
    GradView grad;
    if (c.bf16) {
      g16 = st.at("grad").get<std::vector<uint16_t>>();
      grad = GradView::Bf16(g16.data());
    } else {
      g32 = testing::GoldenFloats(st.at("grad"));
      grad = GradView::Fp32(g32.data());
    }
    StateSlice s{.master = w.data(), .mirror = mirror.data(), .n = n};
    for (size_t k = 0; k < state.size(); ++k) s.slots[k] = state[k].data();
    const AdamStep step =
        rule.MakeStep(c.config, t, c.coefficient, c.config.weight_decay, 1.0);
    const absl::Status done = reference ? rule.UpdateReference(step, grad, s)
                                        : rule.Update(step, grad, s);
    if (!done.ok()) return std::string(done.message());
    const std::vector<float> want = testing::GoldenFloats(st.at("param"));
    for (size_t i = 0; i < n; ++i) {
      if (Bits(w[i]) != Bits(want[i])) {
        return absl::StrCat("t ", t, " param[", i, "]: ", w[i], ", torch ", want[i]);
      }
      if (mirror[i] != FloatToBf16(w[i])) return absl::StrCat("mirror[", i, "]");
    }
    for (size_t k = 0; k < state.size(); ++k) {
      const std::string slot = rule.slots()[k].name;
      const std::vector<float> want_state =
          testing::GoldenFloats(st.at("state").at(slot));
      for (size_t i = 0; i < n; ++i) {
        if (Bits(state[k][i]) != Bits(want_state[i])) {
          return absl::StrCat("t ", t, " ", slot, "[", i, "]: ", state[k][i],
                              ", torch ", want_state[i]);
        }
      }
    }
  }
  return "";
}

TEST(RegisteredRulesGoldenTest, BothKernelsMatchTorchBitForBit) {
  const std::vector<Case> cases = LoadCases();
  ASSERT_FALSE(cases.empty());
  for (const Case& c : cases) {
    for (const bool reference : {true, false}) {
      SCOPED_TRACE(absl::StrCat(c.name, reference ? " reference" : " dispatched"));
      EXPECT_EQ(Replay(c, reference), "");
    }
  }
}

// Every registered rule has a golden case, and an update in this build.
TEST(RegisteredRulesGoldenTest, EveryRegisteredRuleIsCovered) {
  std::set<std::string> covered;
  for (const Case& c : LoadCases()) covered.insert(c.config.rule);
  for (const RuleInfo& r : RegisteredRules()) {
    // The rules with a kind have golden tests of their own (optimizer_test,
    // lion_test, adam8bit_test).
    if (r.kind != OptimizerKind::kRule || !r.element_wise()) continue;
    EXPECT_TRUE(covered.count(r.name)) << r.name << " has no golden case";
    OptimizerConfig c;
    c.kind = OptimizerKind::kRule;
    c.rule = r.name;
    absl::StatusOr<const UpdateRule*> rule = UpdateRuleFor(c);
    ASSERT_TRUE(rule.ok()) << rule.status();
    EXPECT_EQ((*rule)->name(), r.name);
    ASSERT_EQ((*rule)->slots().size(), r.slots.size());
    EXPECT_FALSE((*rule)->HasDeviceUpdate());
  }
  OptimizerConfig unknown;
  unknown.kind = OptimizerKind::kRule;
  unknown.rule = "rmsprop";
  const absl::StatusOr<const UpdateRule*> none = UpdateRuleFor(unknown);
  EXPECT_TRUE(absl::IsNotFound(none.status()));
  EXPECT_NE(none.status().message().find("sgd, adagrad"), std::string::npos);
}

// Every rule for whole tensors has its update in this build, found by
// name; its plan refuses a shape it does not take.
TEST(RegisteredRulesGoldenTest, EveryWholeTensorRuleHasAnUpdate) {
  int found = 0;
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.element_wise()) continue;
    absl::StatusOr<const WholeTensorRule*> u = WholeTensorRuleFor(r.name);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ((*u)->name(), r.name);
    const TensorRule rule = *MakeTensorRule(r.name, {});
    EXPECT_FALSE((*u)->Plan(rule, {}).ok()) << r.name << ": a tensor of no dimensions";
    EXPECT_TRUE((*u)->Plan(rule, {4, 3}).ok()) << r.name;
    ++found;
  }
  EXPECT_EQ(found, 2);
  EXPECT_TRUE(absl::IsNotFound(WholeTensorRuleFor("shampoo").status()));
}

// The comparison can fail: each numeric param of a rule, moved a little
// (or from 0 to 0.01), makes some case of that rule differ from torch.
TEST(RegisteredRulesGoldenTest, APerturbedParamIsCaught) {
  const std::vector<Case> cases = LoadCases();
  for (const RuleInfo& r : RegisteredRules()) {
    // The rules with a kind have golden tests of their own (optimizer_test,
    // lion_test, adam8bit_test).
    if (r.kind != OptimizerKind::kRule || !r.element_wise()) continue;
    for (const RuleParam& p : r.params) {
      if (p.kind != RuleParam::Kind::kNumber) continue;
      bool caught = false;
      for (const Case& c : cases) {
        if (c.config.rule != r.name) continue;
        Case moved = c;
        const double v = RuleParamValue(c.config, p);
        const double w = v == 0 ? 0.01 : v * 1.01;
        if (p.name == "lr") {
          moved.config.lr = w;
        } else if (p.name == "weight_decay") {
          moved.config.weight_decay = w;
        } else if (p.name == "eps") {
          moved.config.eps = w * 100;  // eps hides below large sums
        } else {
          moved.config.rule_params[p.name] = w;
        }
        if (!ValidateOptimizerConfig(moved.config).ok()) continue;
        caught = caught || !Replay(moved, false).empty();
      }
      EXPECT_TRUE(caught) << r.name << "." << p.name << " moved is not seen";
    }
  }
}

// For every rule of the registry: the dispatched kernel (AVX-512 where the
// CPU has it) equals the reference bit for bit on random parameters,
// gradients (FP32 and BF16, some zero or huge) and state, on the first
// step and a later one, with a tail that is not a multiple of 16.
TEST(RegisteredRulesKernelTest, DispatchedEqualsTheReferenceOnRandomInputs) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const size_t n = 3 * 16 * 64 + 11;
  for (const RuleInfo& r : RegisteredRules()) {
    // The rules with a kind have golden tests of their own (optimizer_test,
    // lion_test, adam8bit_test).
    if (r.kind != OptimizerKind::kRule || !r.element_wise()) continue;
    std::map<std::string, double> params;
    // Every param off its default where it can be, and its bools both ways.
    for (const bool flags : {false, true}) {
      for (const RuleParam& p : r.params) {
        if (p.kind == RuleParam::Kind::kBool) {
          params[p.name] = flags ? 1 : 0;
        } else if (p.name == "lr") {
          params[p.name] = 0.03;
        } else if (p.name != "eps") {
          params[p.name] = std::min(p.max, 0.3);
        }
      }
      if (r.name == "sgd" && flags) params["dampening"] = 0;  // Nesterov's
      absl::StatusOr<OptimizerConfig> config = MakeRuleConfig(r, params);
      ASSERT_TRUE(config.ok()) << r.name << ": " << config.status();
      absl::StatusOr<const UpdateRule*> rule = UpdateRuleFor(*config);
      ASSERT_TRUE(rule.ok());
      SCOPED_TRACE(absl::StrCat(r.name, " flags ", flags, " kernel ",
                                (*rule)->KernelName()));
      for (const bool bf16 : {false, true}) {
        for (const uint64_t t : {1, 7}) {
          std::vector<float> w(n), g(n);
          std::vector<uint16_t> g16(n);
          std::vector<std::vector<float>> state(r.slots.size(), std::vector<float>(n));
          for (size_t i = 0; i < n; ++i) {
            w[i] = normal(rng);
            g[i] = i % 97 == 0 ? 0.0f : normal(rng) * (i % 13 == 0 ? 1e4f : 1.0f);
            g16[i] = FloatToBf16(g[i]);
            for (auto& s : state) s[i] = std::fabs(normal(rng));
          }
          std::vector<float> w2 = w;
          std::vector<std::vector<float>> state2 = state;
          std::vector<uint16_t> m1(n), m2(n);
          const GradView grad = bf16 ? GradView::Bf16(g16.data()) : GradView::Fp32(g.data());
          StateSlice a{.master = w.data(), .mirror = m1.data(), .n = n};
          StateSlice b{.master = w2.data(), .mirror = m2.data(), .n = n};
          for (size_t k = 0; k < state.size(); ++k) {
            a.slots[k] = state[k].data();
            b.slots[k] = state2[k].data();
          }
          const AdamStep step = (*rule)->MakeStep(*config, t, 0.5f, config->weight_decay, 1.0);
          ASSERT_TRUE((*rule)->UpdateReference(step, grad, a).ok());
          ASSERT_TRUE((*rule)->Update(step, grad, b).ok());
          EXPECT_EQ(std::memcmp(w.data(), w2.data(), n * 4), 0) << "bf16 " << bf16 << " t " << t;
          EXPECT_EQ(m1, m2);
          for (size_t k = 0; k < state.size(); ++k) {
            EXPECT_EQ(std::memcmp(state[k].data(), state2[k].data(), n * 4), 0);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace registered_rules_test
}  // namespace zeroshard
