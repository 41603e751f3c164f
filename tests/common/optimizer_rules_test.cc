// The registry of rules described by data (common/optimizer_rules.h): its
// entries are well formed; a config names a rule by its type and takes its
// params with their defaults, ranges, fixed and no-effect keywords; the
// resolved config and the wire carry it; a name not registered is refused
// listing those that are; the legacy types still parse by name, not by
// their place in a list.
#include "common/optimizer_rules.h"

#include <cmath>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/param_groups.h"
#include "common/resolved_config.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

OptimizerConfig Parse(const std::string& optimizer, std::string* warning = nullptr) {
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(absl::StrCat(
      R"({"train_micro_batch_size_per_gpu": 1, "optimizer": )", optimizer, "}"));
  EXPECT_TRUE(p.ok()) << p.status() << "\n" << optimizer;
  if (!p.ok()) return {};
  if (warning != nullptr) {
    for (const std::string& w : p->warnings) absl::StrAppend(warning, w, "\n");
  }
  return p->config.optimizer;
}

absl::Status ParseError(const std::string& optimizer) {
  return ParseTrainingConfig(absl::StrCat(
                                 R"({"train_micro_batch_size_per_gpu": 1, "optimizer": )",
                                 optimizer, "}"))
      .status();
}

// Each optimizer section is INVALID_ARGUMENT with its needle in the message.
void ExpectRefused(const std::vector<std::pair<std::string, std::string>>& bad) {
  for (const auto& [text, needle] : bad) {
    const absl::Status s = ParseError(text);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << text << ": " << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  }
}

// A rule for whole tensors: found by FindTensorRule alone; its defaults
// make a valid rule, which round-trips through its params; its state
// declared in at most AdamW's two slots, each piece placed inside them.
TEST(OptimizerRulesTest, WholeTensorEntriesAreWellFormed) {
  int whole = 0;
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.element_wise()) continue;
    SCOPED_TRACE(r.name);
    ++whole;
    EXPECT_EQ(FindTensorRule(r.name), &r);
    EXPECT_EQ(FindRule(r.name), nullptr);
    EXPECT_EQ(RegisteredRuleNames().find(r.name), std::string::npos);
    EXPECT_NE(TensorRuleNames().find(r.name), std::string::npos);
    EXPECT_TRUE(r.slots.empty());
    ASSERT_FALSE(r.tensor_state.empty());
    EXPECT_LE(r.SlotsNeeded(), 2u);
    ASSERT_NE(r.FindParam("weight_decay"), nullptr);
    absl::StatusOr<TensorRule> rule = MakeTensorRule(r.name, {});
    ASSERT_TRUE(rule.ok()) << rule.status();
    EXPECT_EQ(*MakeTensorRule(r.name, rule->params), *rule);
    EXPECT_TRUE(ValidateTensorRule(*rule, "x").ok());
    EXPECT_EQ(DescribeTensorRule(*rule).rfind(r.types.front(), 0), 0u);
    // Every piece of state of a 6 x 5 matrix and of a 7-vector lies inside
    // its element slot; some applies to each.
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{6, 5}, std::vector<int64_t>{7}, std::vector<int64_t>{2, 3, 4}}) {
      uint64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      uint64_t placed = 0;
      for (const TensorSlot& ts : r.tensor_state) {
        const TensorSlotPlace p = PlaceTensorSlot(ts, *rule, shape);
        EXPECT_LE(p.offset + p.count, numel) << ts.name;
        placed += p.count;
      }
      if (!r.matrices_only.empty() && shape.size() < 2) continue;
      EXPECT_GT(placed, 0u);
    }
    // A keyword it does not take, and a value out of range, are refused
    // naming it.
    absl::StatusOr<TensorRule> bad = MakeTensorRule(r.name, {{"betas", 0.5}}, "g");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("g.betas"), std::string::npos) << bad.status();
    bad = MakeTensorRule(r.name, {{"weight_decay", -1}}, "g");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("g.weight_decay"), std::string::npos)
        << bad.status();
  }
  EXPECT_EQ(whole, 2);  // Muon, Adafactor
  EXPECT_EQ(TensorRuleTypes(), "Muon or Adafactor");
  // Adafactor's state by its declaration: a 2 x 3 x 4 tensor's 2 x 3 row
  // statistics then 2 x 4 column statistics in slot 1, the first moment in
  // slot 0 only with beta1.
  const RuleInfo& a = *FindTensorRule("adafactor");
  TensorRule plain = *MakeTensorRule("adafactor", {});
  TensorRule beta = *MakeTensorRule("adafactor", {{"beta1", 0.9}});
  auto place = [&](const TensorRule& rule, const char* name,
                   const std::vector<int64_t>& shape) {
    for (const TensorSlot& ts : a.tensor_state) {
      const TensorSlotPlace p = PlaceTensorSlot(ts, rule, shape);
      if (ts.name == name) return std::vector<uint64_t>{static_cast<uint64_t>(p.slot), p.offset, p.count};
    }
    return std::vector<uint64_t>{};
  };
  EXPECT_EQ(place(plain, "exp_avg_sq_row", {2, 3, 4}), (std::vector<uint64_t>{1, 0, 6}));
  EXPECT_EQ(place(plain, "exp_avg_sq_col", {2, 3, 4}), (std::vector<uint64_t>{1, 6, 8}));
  EXPECT_EQ(place(plain, "exp_avg_sq", {2, 3, 4})[2], 0u);
  EXPECT_EQ(place(plain, "exp_avg_sq", {7}), (std::vector<uint64_t>{1, 0, 7}));
  EXPECT_EQ(place(plain, "exp_avg", {7})[2], 0u);
  EXPECT_EQ(place(beta, "exp_avg", {7}), (std::vector<uint64_t>{0, 0, 7}));
  // Hugging Face's refusals, by the entry's check.
  for (const auto& [params, needle] :
       std::vector<std::pair<std::map<std::string, double>, std::string>>{
           {{{"lr", 0.1}}, "\"g.lr\": cannot be combined with relative_step"},
           {{{"relative_step", 0}}, "\"g.lr\": must be a positive number"},
           {{{"relative_step", 0}, {"lr", 0.1}, {"warmup_init", 1}}, "g.warmup_init"},
           {{{"decay_rate", 0}}, "g.decay_rate"},
           {{{"beta1", 1}}, "g.beta1"}}) {
    absl::StatusOr<TensorRule> r = MakeTensorRule("adafactor", params, "g");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  }
}

TEST(OptimizerRulesTest, EveryEntryIsWellFormed) {
  std::set<std::string> names, types;
  ASSERT_GE(RegisteredRules().size(), 2u);
  for (const RuleInfo& r : RegisteredRules()) {
    SCOPED_TRACE(r.name);
    EXPECT_TRUE(names.insert(r.name).second) << "a name twice";
    EXPECT_FALSE(r.types.empty());
    for (const std::string& t : r.types) {
      EXPECT_TRUE(types.insert(t).second) << "type " << t << " twice";
    }
    EXPECT_EQ(FindRuleByType(r.types.front()), &r);
    if (!r.element_wise()) continue;  // WholeTensorEntriesAreWellFormed
    // Lion and the 8-bit Adams have no torch class; every rule added since
    // has one.
    EXPECT_TRUE(!r.torch_class.empty() || r.kind != OptimizerKind::kRule);
    EXPECT_FALSE(r.slots.empty());
    EXPECT_LE(r.slots.size(), 4u);
    ASSERT_NE(r.FindParam("lr"), nullptr);
    EXPECT_EQ(FindRule(r.name), &r);
    EXPECT_EQ(FindTensorRule(r.name), nullptr);
    // Its defaults (lr given where required) make a valid config.
    std::map<std::string, double> given;
    if (std::isnan(r.FindParam("lr")->default_value)) given["lr"] = 0.1;
    absl::StatusOr<OptimizerConfig> c = MakeRuleConfig(r, given);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(ValidateOptimizerConfig(*c).ok());
    EXPECT_EQ(OptimizerStateSlots(*c).size(), r.slots.size());
    EXPECT_EQ(OptimizerName(*c), r.name);
    EXPECT_EQ(c->kind, r.kind);
    EXPECT_EQ(RuleOf(*c), &r);
    if (r.kind != OptimizerKind::kRule) EXPECT_EQ(&RuleOfKind(r.kind), &r);
    if (!r.mode_param.empty()) EXPECT_NE(FindRule(r.mode_rule), nullptr);
  }
  // Every kind but kRule has its entry, and so is named on the wire.
  for (const OptimizerKind k :
       {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kLion,
        OptimizerKind::kAdamW8bit, OptimizerKind::kAdam8bit}) {
    EXPECT_EQ(RuleOfKind(k).kind, k);
  }
  EXPECT_EQ(FindRuleByType("sgd"), FindRule("sgd"));  // case aside
  // A kind's entry is not named by a kRule config.
  OptimizerConfig named;
  named.kind = OptimizerKind::kRule;
  named.rule = "adamw";
  EXPECT_EQ(RuleOf(named), nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateOptimizerConfig(named)));
}

// The five rules with a kind of their own keep their defaults, ranges and
// DeepSpeed's and bitsandbytes' switches, now from their entries.
TEST(OptimizerRulesTest, TheKindsParseFromTheirEntries) {
  const OptimizerConfig lion = Parse(R"({"type": "Lion", "params": {"eps": 1}})");
  EXPECT_EQ(lion.kind, OptimizerKind::kLion);
  EXPECT_EQ(lion.lr, 1e-4);
  EXPECT_EQ(lion.beta2, 0.99);
  EXPECT_EQ(lion.weight_decay, 0.0);
  const OptimizerConfig l2 = Parse(R"({"type": "Adam", "params": {"adam_w_mode": false,
      "betas": "auto", "weight_decay": 0.1}})");
  EXPECT_EQ(l2.kind, OptimizerKind::kAdam);
  EXPECT_EQ(l2.beta1, 0.9);
  EXPECT_EQ(l2.weight_decay, 0.1);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"type": "AdamW", "params": {"betas": [0.9, 1.0]}})",
       "expected [beta1, beta2], two numbers in [0, 1) or \"auto\""},
      {R"({"type": "AdamW", "params": {"betas": [0.9]}})", "betas"},
      {R"({"type": "AdamW", "params": {"eps": 0}})", "optimizer.params.eps"},
      {R"({"type": "AdamW", "params": {"amsgrad": true}})", "keep no max of v"},
      {R"({"type": "Adam", "params": {"adam_w_mode": 1}})", "adam_w_mode"},
      {R"({"type": "AdamW8bit", "params": {"optim_bits": 32}})",
       "expected 8 (an 8-bit type; use \"AdamW\" for 32-bit state)"},
      {R"({"type": "Adam8bit", "params": {"block_wise": false}})", "blocks of 2048"},
      {R"({"type": "Lion", "params": {"lr": 0}})", "optimizer.params.lr"},
      {R"({"params": {"adam_w_mode": false}})", "adam_w_mode"},
  };
  ExpectRefused(bad);
}

TEST(OptimizerRulesTest, SgdAndAdagradParseWithTheirDefaults) {
  std::string warning;
  const OptimizerConfig s = Parse(R"({"type": "SGD", "params": {"lr": 0.1,
      "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4, "foreach": null,
      "maximize": false, "differentiable": false}})", &warning);
  EXPECT_EQ(s.kind, OptimizerKind::kRule);
  EXPECT_EQ(s.rule, "sgd");
  EXPECT_EQ(s.lr, 0.1);
  EXPECT_EQ(s.weight_decay, 5e-4);
  EXPECT_EQ(s.rule_params.at("momentum"), 0.9);
  EXPECT_EQ(s.rule_params.at("nesterov"), 1.0);
  EXPECT_EQ(s.rule_params.at("dampening"), 0.0);
  EXPECT_NE(warning.find("optimizer.params.differentiable"), std::string::npos)
      << warning;
  const OptimizerConfig a = Parse(R"({"type": "adagrad"})");
  EXPECT_EQ(a.rule, "adagrad");
  EXPECT_EQ(a.lr, 1e-2);  // torch's defaults
  EXPECT_EQ(a.eps, 1e-10);
  EXPECT_EQ(a.weight_decay, 0.0);
  EXPECT_EQ(a.rule_params.at("lr_decay"), 0.0);
  EXPECT_EQ(a.rule_params.at("initial_accumulator_value"), 0.0);
}

TEST(OptimizerRulesTest, BadParamsAreRefusedNamingThem) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"type": "SGD"})", "optimizer.params.lr\" is required"},
      {R"({"type": "SGD", "params": {"lr": 0.1, "momentum": -1}})", "momentum"},
      {R"({"type": "SGD", "params": {"lr": 0.1, "dampening": 2}})", "dampening"},
      {R"({"type": "SGD", "params": {"lr": 0.1, "nesterov": true}})",
       "Nesterov momentum needs momentum > 0"},
      {R"({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9,
          "dampening": 0.1, "nesterov": true}})", "dampening 0"},
      {R"({"type": "SGD", "params": {"lr": 0.1, "maximize": true}})", "maximize"},
      {R"({"type": "SGD", "params": {"lr": 0.1, "nesterov": 3}})", "nesterov"},
      {R"({"type": "Adagrad", "params": {"eps": 0}})", "eps"},
      {R"({"type": "Adagrad", "params": {"lr_decay": -0.1}})", "lr_decay"},
      {R"({"type": "Momentum"})", "\"SGD\", \"Adagrad\""},
  };
  ExpectRefused(bad);
  // An unknown key is a warning that names it, as for every section.
  std::string warning;
  Parse(R"({"type": "SGD", "params": {"lr": 0.1, "momentun": 0.9}})", &warning);
  EXPECT_NE(warning.find("did you mean \"optimizer.params.momentum\""),
            std::string::npos) << warning;
}

// Types are matched by name: the legacy ones keep their rules whatever the
// list holds after them (appending "SGD" once made it parse as 8-bit Adam
// where types were told apart by their index).
TEST(OptimizerRulesTest, LegacyTypesStillParseByName) {
  EXPECT_EQ(Parse(R"({"type": "AdamW"})").kind, OptimizerKind::kAdamW);
  EXPECT_EQ(Parse(R"({"type": "Adam", "params": {"adam_w_mode": false}})").kind,
            OptimizerKind::kAdam);
  EXPECT_EQ(Parse(R"({"type": "Lion"})").kind, OptimizerKind::kLion);
  EXPECT_EQ(Parse(R"({"type": "PagedAdam8bit"})").kind, OptimizerKind::kAdam8bit);
  EXPECT_EQ(Parse(R"({"type": "AdamW8bit"})").kind, OptimizerKind::kAdamW8bit);
  EXPECT_EQ(Parse(R"({"type": "SGD", "params": {"lr": 1}})").kind,
            OptimizerKind::kRule);
  EXPECT_EQ(Parse(R"({"params": {"lr": 0.5}})").kind,
            OptimizerKind::kAdamW);  // no type: AdamW, as before
}

TEST(OptimizerRulesTest, TheResolvedConfigCarriesTheRule) {
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(
      R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD",
          "params": {"lr": 0.2, "momentum": 0.5}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string text = ResolvedConfigJson(p->config);
  absl::StatusOr<TrainingConfig> back = ParseResolvedConfig(text);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(back->optimizer, p->config.optimizer);
  EXPECT_EQ(back->optimizer.rule, "sgd");
  EXPECT_EQ(back->optimizer.rule_params.at("momentum"), 0.5);
  EXPECT_NE(text.find("rule_params"), std::string::npos) << text;
  // A legacy kind writes neither field.
  absl::StatusOr<ParsedConfig> w =
      ParseTrainingConfig(R"({"train_micro_batch_size_per_gpu": 1})");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(ResolvedConfigJson(w->config).find("rule_params"), std::string::npos);
}

TEST(OptimizerRulesTest, ValidationRefusesWhatTheRegistryDoesNotHold) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kRule;
  c.rule = "rmsprop";
  absl::Status s = ValidateOptimizerConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("sgd, adagrad"), std::string::npos) << s;
  c.rule = "sgd";
  c.lr = 0.1;
  c.rule_params["betas"] = 0.9;
  s = ValidateOptimizerConfig(c);
  EXPECT_NE(s.message().find("\"betas\" is not a param of rule sgd"),
            std::string::npos) << s;
  c.rule_params = {{"lr", 0.2}};  // has its own field
  EXPECT_FALSE(ValidateOptimizerConfig(c).ok());
  c.rule_params.clear();
  EXPECT_TRUE(ValidateOptimizerConfig(c).ok());
  OptimizerConfig adam;
  adam.rule = "sgd";  // a rule name on a legacy kind
  EXPECT_FALSE(ValidateOptimizerConfig(adam).ok());
}

// DeepSpeed 0.19's "Muon" (MuonWithAuxAdam): Muon on the matrices, AdamW on
// the rest, with its params and defaults; muon_lr and adam_lr in place of
// lr; a matrices rule of zeroshard.param_groups kept.
TEST(OptimizerRulesTest, DeepSpeedsMuonGivesTheMatricesMuonAndTheRestAdamW) {
  auto parse = [](const std::string& extra) {
    absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(absl::StrCat(
        R"({"train_micro_batch_size_per_gpu": 1, )", extra, "}"));
    EXPECT_TRUE(p.ok()) << p.status() << "\n" << extra;
    return p.ok() ? p->config : TrainingConfig{};
  };
  auto matrices = [](const TrainingConfig& c) {
    return c.param_groups.classes[static_cast<int>(TensorClass::kMatrix)].rule;
  };
  TrainingConfig c = parse(R"("optimizer": {"type": "Muon"})");
  EXPECT_EQ(c.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.optimizer.eps, 1e-10);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(matrices(c).name, "muon");
  EXPECT_EQ(matrices(c).Param("lr"), 0.02);
  EXPECT_EQ(matrices(c).Param("momentum"), 0.95);
  EXPECT_EQ(matrices(c).Param("nesterov"), 1);
  for (TensorClass k : {TensorClass::kEmbedding, TensorClass::kBias, TensorClass::kNorm}) {
    EXPECT_FALSE(c.param_groups.classes[static_cast<int>(k)].rule.active());
  }
  c = parse(R"("optimizer": {"type": "muon", "params": {"lr": 0.01,
      "momentum": 0.9, "weight_decay": 0.1, "betas": [0.8, 0.9], "eps": 1e-8,
      "ns_method": "gram"}})");
  EXPECT_EQ(c.optimizer.lr, 0.01);  // DeepSpeed's lr is both groups'
  EXPECT_EQ(matrices(c).Param("lr"), 0.01);
  EXPECT_EQ(matrices(c).Param("momentum"), 0.9);
  EXPECT_EQ(matrices(c).Param("weight_decay"), 0.1);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.optimizer.beta1, 0.8);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  c = parse(R"("optimizer": {"type": "Muon", "params": {"lr": 0.5,
      "muon_lr": 0.03, "adam_lr": 1e-3}})");
  EXPECT_EQ(matrices(c).Param("lr"), 0.03);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  c = parse(R"("optimizer": {"type": "Muon"}, "zeroshard": {"param_groups":
      {"matrices": {"optimizer": {"type": "Muon", "params": {"lr": 0.07}}}}})");
  EXPECT_EQ(matrices(c).Param("lr"), 0.07);
  for (const char* bad : {R"({"type": "Muon", "params": {"momentum": 1}})",
                          R"({"type": "Muon", "params": {"betas": [1, 0.9]}})",
                          R"({"type": "Muon", "params": {"muon_lr": 0}})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseError(bad))) << bad;
  }
}

}  // namespace
}  // namespace zeroshard
