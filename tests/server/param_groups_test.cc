// Parameter groups end to end below the RPC layer: zeroshard.param_groups
// parsing (common/param_groups.h), tensor classes and their flat ranges, the
// server's per-range table (server/param_group_table.h), and the update
// against torch.optim.AdamW / Adam with the same groups
// (tests/fixtures/param_groups_golden.json, made once by
// tests/fixtures/make_param_groups_golden.py): every optimizer kernel over
// the group spans, and two ModelShards applying pushes through an Init that
// carries the groups as ranges, bit for bit.
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "common/config.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/param_groups.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "optim/adafactor_options.h"
#include "optim/optimizer.h"
#include "optim/optimizer_kernels.h"
#include "server/model_shard.h"
#include "server/param_group_table.h"
#include "tests/server/server_test_util.h"
#include "tests/support/golden_json.h"
#include "wire/optimizer_difference.h"
#include "tests/server/shard_state_util.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

using nlohmann::json;

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// ---- Parsing and classes.

TEST(ParamGroupsTest, DefaultIsHuggingFaceAndSingleIsOneGroup) {
  const ParamGroups hf;
  EXPECT_FALSE(hf.single);
  EXPECT_TRUE(hf.classes[0].optimizer_weight_decay);  // matrices
  EXPECT_TRUE(hf.classes[1].optimizer_weight_decay);  // embeddings
  EXPECT_FALSE(hf.classes[2].optimizer_weight_decay);  // biases
  EXPECT_EQ(hf.classes[2].weight_decay, 0.0);
  EXPECT_FALSE(hf.classes[3].optimizer_weight_decay);  // norms
  EXPECT_EQ(hf.classes[3].weight_decay, 0.0);
  EXPECT_EQ(*ParseParamGroups("\"default\""), hf);
  EXPECT_EQ(*ParseParamGroups("{}"), hf);
  EXPECT_TRUE(ParseParamGroups("\"single\"")->single);
  EXPECT_EQ(DescribeParamGroups(ParamGroups::Single(), 0.1),
            "single (weight_decay 0.1 on every tensor)");
  EXPECT_EQ(DescribeParamGroups(hf, 0.1),
            "matrices: weight_decay 0.1, lr_scale 1; embeddings: weight_decay "
            "0.1, lr_scale 1; biases: weight_decay 0, lr_scale 1; norms: "
            "weight_decay 0, lr_scale 1");
}

TEST(ParamGroupsTest, ClassesTakeTheirSettingsAndOthersKeepTheDefault) {
  absl::StatusOr<ParamGroups> g = ParseParamGroups(
      R"({"norms": {"lr_scale": 2}, "embeddings": {"weight_decay": 0.0}})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->classes[3].lr_scale, 2.0);
  EXPECT_FALSE(g->classes[3].optimizer_weight_decay);
  EXPECT_FALSE(g->classes[1].optimizer_weight_decay);
  EXPECT_EQ(g->classes[1].weight_decay, 0.0);
  EXPECT_TRUE(g->classes[0].optimizer_weight_decay);
  EXPECT_EQ(g->classes[0].lr_scale, 1.0);
}

TEST(ParamGroupsTest, ErrorsNameTheKey) {
  struct Bad {
    const char* json;
    const char* key;
  };
  for (const Bad& b : {
           Bad{"\"hf\"", "zeroshard.param_groups"},
           Bad{"3", "zeroshard.param_groups"},
           Bad{R"({"weights": {}})", "zeroshard.param_groups.weights"},
           Bad{R"({"norms": 0})", "zeroshard.param_groups.norms"},
           Bad{R"({"norms": {"decay": 0}})", "zeroshard.param_groups.norms.decay"},
           Bad{R"({"biases": {"weight_decay": -1}})",
               "zeroshard.param_groups.biases.weight_decay"},
           Bad{R"({"matrices": {"lr_scale": "x"}})",
               "zeroshard.param_groups.matrices.lr_scale"},
           // Tensor rules: Muon on 1-D tensors or embeddings, an unknown
           // rule, bad or unknown hyperparameters, settings of the group's
           // own beside the rule's.
           Bad{R"({"biases": {"optimizer": {"type": "Muon"}}})",
               "zeroshard.param_groups.biases.optimizer"},
           Bad{R"({"norms": {"optimizer": {"type": "Muon"}}})",
               "zeroshard.param_groups.norms.optimizer"},
           Bad{R"({"embeddings": {"optimizer": {"type": "Muon"}}})",
               "zeroshard.param_groups.embeddings.optimizer"},
           Bad{R"({"matrices": {"optimizer": {"type": "Lamb"}}})",
               "zeroshard.param_groups.matrices.optimizer.type"},
           Bad{R"({"matrices": {"optimizer": {"params": {}}}})",
               "zeroshard.param_groups.matrices.optimizer.type"},
           Bad{R"({"matrices": {"optimizer": {"type": "Muon", "params": {"momentum": 1.0}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.momentum"},
           Bad{R"({"matrices": {"optimizer": {"type": "Muon", "params": {"lr": 0}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.lr"},
           Bad{R"({"matrices": {"optimizer": {"type": "Muon", "params": {"nesterov": 1}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.nesterov"},
           Bad{R"({"matrices": {"optimizer": {"type": "Muon", "params": {"ns_precision": "fp16"}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.ns_precision"},
           Bad{R"({"matrices": {"optimizer": {"type": "Muon", "params": {"betas": [0.9, 0.99]}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.betas"},
           Bad{R"({"matrices": {"weight_decay": 0.1, "optimizer": {"type": "Muon"}}})",
               "zeroshard.param_groups.matrices.weight_decay"},
           // Adafactor: Hugging Face's contradictions, bad and unknown
           // params, Muon's params.
           Bad{R"({"norms": {"optimizer": {"type": "Adafactor", "params": {"lr": 0.01}}}})",
               "zeroshard.param_groups.norms.optimizer.params.lr"},
           Bad{R"({"norms": {"optimizer": {"type": "Adafactor", "params": {"relative_step": false}}}})",
               "zeroshard.param_groups.norms.optimizer.params.lr"},
           Bad{R"({"norms": {"optimizer": {"type": "Adafactor", "params": {"relative_step": false, "lr": 1e-3, "warmup_init": true}}}})",
               "zeroshard.param_groups.norms.optimizer.params.warmup_init"},
           Bad{R"({"biases": {"optimizer": {"type": "Adafactor", "params": {"eps": 1e-30}}}})",
               "zeroshard.param_groups.biases.optimizer.params.eps"},
           Bad{R"({"biases": {"optimizer": {"type": "Adafactor", "params": {"decay_rate": 0.8}}}})",
               "zeroshard.param_groups.biases.optimizer.params.decay_rate"},
           Bad{R"({"matrices": {"optimizer": {"type": "Adafactor", "params": {"beta1": 1}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.beta1"},
           Bad{R"({"matrices": {"optimizer": {"type": "Adafactor", "params": {"momentum": 0.9}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.momentum"},
           Bad{R"({"matrices": {"optimizer": {"type": "Adafactor", "params": {"warmup_init": "yes"}}}})",
               "zeroshard.param_groups.matrices.optimizer.params.warmup_init"},
           Bad{R"({"embeddings": {"lr_scale": 2, "optimizer": {"type": "Adafactor"}}})",
               "zeroshard.param_groups.embeddings.lr_scale"},
       }) {
    absl::StatusOr<ParamGroups> g = ParseParamGroups(b.json);
    ASSERT_FALSE(g.ok()) << b.json;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(absl::StrCat("\"", b.key, "\"")),
              std::string::npos)
        << g.status();
  }
}

TEST(ParamGroupsTest, MuonForMatricesResolvesAndMarksThemWhole) {
  absl::StatusOr<ParamGroups> parsed =
      ParseParamGroups(R"({"matrices": {"optimizer": {"type": "Muon",
          "params": {"lr": 0.05, "nesterov": false, "weight_decay": 0.1,
                     "ns_precision": "bf16"}}}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ParamGroups& g = *parsed;
  const TensorRule& r = g.classes[static_cast<int>(TensorClass::kMatrix)].rule;
  EXPECT_EQ(r.name, "muon");
  EXPECT_EQ(r.Param("lr"), 0.05);
  EXPECT_EQ(r.Param("momentum"), 0.95);  // Muon's default
  EXPECT_EQ(r.Param("nesterov"), 0);
  EXPECT_EQ(r.Param("weight_decay"), 0.1);
  EXPECT_EQ(r.Param("ns_precision"), 1);  // "bf16"
  for (int c = 1; c < kNumTensorClasses; ++c) {
    EXPECT_FALSE(g.classes[c].rule.active()) << c;
  }
  ModelManifest m = FromProto(testing::SmallManifest(2));
  MarkWholeTensors(g, &m);
  int whole = 0;
  for (const UnitSpec& u : m.units) {
    for (const TensorSpec& t : u.tensors) {
      EXPECT_EQ(t.keep_whole, t.param_class == TensorClass::kMatrix) << t.name;
      whole += t.keep_whole;
    }
  }
  EXPECT_GT(whole, 0);
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(m, 2, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<ResolvedGroup> resolved = ResolveParamGroups(*layout, g, 0.3);
  bool found = false;
  for (const ResolvedGroup& rg : resolved) {
    if (rg.name != "matrices") {
      EXPECT_FALSE(rg.rule.active()) << rg.name;
      continue;
    }
    found = true;
    EXPECT_EQ(rg.rule, r);
    EXPECT_EQ(rg.weight_decay, 0.1);  // the rule's own
    EXPECT_EQ(rg.lr_scale, 1.0);
  }
  EXPECT_TRUE(found);
  // The rule crosses the wire and back.
  v1::OptimizerConfig o;
  AddParamGroups(resolved, &o);
  EXPECT_EQ(ParamGroupsFromProto(o)[0].rule, resolved[0].rule);
  EXPECT_NE(DescribeParamGroups(g, 0.3).find("matrices: Muon lr 0.05"),
            std::string::npos);
}

TEST(ParamGroupsTest, AdafactorForAnyClassAndAsTheOptimizerType) {
  absl::StatusOr<ParamGroups> parsed = ParseParamGroups(
      R"({"norms": {"optimizer": {"type": "Adafactor", "params": {
            "lr": null, "eps": [1e-29, 2e-3], "clip_threshold": 2,
            "decay_rate": -0.5, "beta1": 0.9, "weight_decay": 0.01,
            "scale_parameter": false, "warmup_init": true}}}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const TensorRule& r = parsed->classes[static_cast<int>(TensorClass::kNorm)].rule;
  ASSERT_EQ(r.name, "adafactor");
  const AdafactorOptions want{.lr = 0, .eps1 = 1e-29, .eps2 = 2e-3,
                              .clip_threshold = 2, .decay_rate = -0.5,
                              .beta1 = 0.9, .weight_decay = 0.01,
                              .scale_parameter = false, .relative_step = true,
                              .warmup_init = true};
  EXPECT_EQ(AdafactorOptionsOf(r), want);
  EXPECT_EQ(r.decay(), 0.01);
  ModelManifest m = FromProto(testing::SmallManifest(2));
  MarkWholeTensors(*parsed, &m);
  for (const UnitSpec& u : m.units) {
    for (const TensorSpec& t : u.tensors) {
      EXPECT_EQ(t.keep_whole, t.param_class == TensorClass::kNorm) << t.name;
    }
  }
  // The rule crosses the wire and back, beta1 absent or not.
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(m, 1, 1);
  ASSERT_TRUE(layout.ok());
  for (double beta1 : {0.9, -1.0}) {
    ParamGroups g = *parsed;
    g.classes[static_cast<int>(TensorClass::kNorm)].rule.params["beta1"] = beta1;
    const std::vector<ResolvedGroup> resolved = ResolveParamGroups(*layout, g, 0.3);
    v1::OptimizerConfig o;
    AddParamGroups(resolved, &o);
    const std::vector<ResolvedGroup> back = ParamGroupsFromProto(o);
    ASSERT_EQ(back.size(), resolved.size());
    for (size_t i = 0; i < back.size(); ++i) {
      EXPECT_EQ(back[i].rule, resolved[i].rule) << back[i].name;
      if (back[i].name == "norms") {
        EXPECT_EQ(back[i].weight_decay, 0.01);
      }
    }
  }
  const std::string described = DescribeParamGroups(*parsed, 0.3);
  for (const char* part : {"norms: Adafactor lr none, eps [1e-29, 0.002]",
                           "beta1 0.9", "warmup_init true"}) {
    EXPECT_NE(described.find(part), std::string::npos) << described;
  }

  // optimizer.type "Adafactor": every class without a rule of its own, over
  // AdamW's slots; a fixed lr becomes the schedule's peak; a scheduler
  // beside the relative step is said to do nothing.
  absl::StatusOr<ParsedConfig> whole = ParseTrainingConfig(
      R"({"train_batch_size": 2, "optimizer": {"type": "Adafactor"},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1}},
          "zeroshard": {"param_groups": {"matrices": {"optimizer": {"type": "Muon"}}}}})");
  ASSERT_TRUE(whole.ok()) << whole.status();
  const ParamGroups& g = whole->config.param_groups;
  EXPECT_FALSE(g.single);
  EXPECT_EQ(g.classes[0].rule.name, "muon");
  for (int c = 1; c < kNumTensorClasses; ++c) {
    EXPECT_EQ(g.classes[c].rule.name, "adafactor") << c;
    EXPECT_EQ(AdafactorOptionsOf(g.classes[c].rule), AdafactorOptions{}) << c;
  }
  EXPECT_EQ(whole->config.optimizer.kind, OptimizerKind::kAdamW);
  bool warned = false;
  for (const std::string& w : whole->warnings) {
    warned |= w.find("\"scheduler\" has no effect") != std::string::npos;
  }
  EXPECT_TRUE(warned);
  absl::StatusOr<ParsedConfig> fixed = ParseTrainingConfig(
      R"({"train_batch_size": 2, "optimizer": {"type": "Adafactor",
          "params": {"lr": 0.003, "relative_step": false}}})");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->config.optimizer.lr, 0.003);
  EXPECT_EQ(fixed->config.param_groups.classes[1].rule.Param("lr"), 0.003);
  absl::StatusOr<ParsedConfig> bad = ParseTrainingConfig(
      R"({"train_batch_size": 2, "optimizer": {"type": "Adafactor",
          "params": {"lr": 0.003}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"optimizer.params.lr\": cannot be combined"),
            std::string::npos)
      << bad.status();
}

TEST(ParamGroupsTest, TrainingConfigReadsTheSection) {
  const char* base = R"({"train_batch_size": 2, "zeroshard": {%s}})";
  auto parse = [&](const std::string& inner) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), base, inner.c_str());
    return ParseTrainingConfig(buf);
  };
  absl::StatusOr<ParsedConfig> plain = parse("");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->config.param_groups, ParamGroups());
  absl::StatusOr<ParsedConfig> single = parse(R"("param_groups": "single")");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_TRUE(single->config.param_groups.single);
  // The groups are part of the run's identity (resume and worker agreement).
  EXPECT_NE(ConfigFingerprint(plain->config),
            ConfigFingerprint(single->config));
  absl::StatusOr<ParsedConfig> bad =
      parse(R"("param_groups": {"norms": {"lr_scale": -2}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("zeroshard.param_groups.norms.lr_scale"),
            std::string::npos)
      << bad.status();
}

// ---- The golden file.

struct GoldenCase {
  std::string name;
  OptimizerConfig config;
  ParamGroups groups;
  float coefficient = 1;
  bool bf16 = false;
  json data;
};

struct Golden {
  ModelManifest manifest;
  std::vector<GoldenCase> cases;
};

std::vector<float> Floats(const json& bits) {
  return testing::GoldenFloats(bits);
}

// The class make_param_groups_golden.py gives each of its GPT-2-named
// tensors (GPT-2's manifest states the same, model/gpt_manifest.cc): 2-D wte
// and wpe are embeddings, other 2-D tensors matrices, 1-D ".bias" biases and
// the other 1-D tensors norms.
TensorClass FixtureClass(const std::string& name,
                         const std::vector<int64_t>& shape) {
  auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (shape.size() >= 2) {
    return name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0
               ? TensorClass::kEmbedding
               : TensorClass::kMatrix;
  }
  return ends_with("bias") ? TensorClass::kBias : TensorClass::kNorm;
}

Golden LoadGolden() {
  Golden g;
  std::ifstream in("tests/fixtures/param_groups_golden.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/param_groups_golden.json not "
                            "found; tests run from the repo root";
  if (!in.good()) return g;
  const json doc = json::parse(in);
  UnitSpec unit{"model", {}};
  for (const auto& t : doc.at("tensors")) {
    TensorSpec spec{t.at("name"), t.at("shape").get<std::vector<int64_t>>()};
    spec.param_class = FixtureClass(spec.name, spec.shape);
    unit.tensors.push_back(std::move(spec));
  }
  g.manifest.units = {unit};
  g.manifest.partition_count = 1;
  for (const auto& c : doc.at("cases")) {
    GoldenCase k;
    k.name = c.at("name");
    k.config = testing::GoldenOptimizerConfig(c, OptimizerKind::kAdamW);
    const OptimizerConfig& o = k.config;
    EXPECT_TRUE(ValidateOptimizerConfig(o).ok()) << k.name;
    absl::StatusOr<ParamGroups> groups =
        ParseParamGroups(c.at("param_groups").dump());
    EXPECT_TRUE(groups.ok()) << k.name << ": " << groups.status();
    if (groups.ok()) k.groups = *groups;
    k.coefficient = c.at("coefficient").get<double>();
    k.bf16 = c.at("grad_dtype") == "bf16";
    k.data = c;
    g.cases.push_back(std::move(k));
  }
  EXPECT_EQ(g.cases.size(), 4u);
  return g;
}

// The first n of got equal want bit for bit; "" or the first difference.
std::string DiffBits(const std::vector<float>& got,
                     const std::vector<float>& want, const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (i >= got.size() || Bits(got[i]) != Bits(want[i])) {
      return absl::StrCat(what, "[", i, "]: got ",
                          i < got.size() ? got[i] : -0.0f, ", torch ", want[i]);
    }
  }
  return "";
}

TEST(ParamGroupsGoldenTest, RangesFollowTheTensors) {
  const Golden g = LoadGolden();
  ASSERT_FALSE(g.cases.empty());
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(g.manifest, 1, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<ResolvedGroup> r =
      ResolveParamGroups(*layout, ParamGroups(), 0.1);
  ASSERT_EQ(r.size(), 4u);
  // matrices: c_attn [65, 140), c_fc [155, 255).
  EXPECT_EQ(r[0].name, "matrices");
  ASSERT_EQ(r[0].ranges.size(), 2u);
  EXPECT_EQ(r[0].ranges[0], (FlatRange{65, 140}));
  EXPECT_EQ(r[0].ranges[1], (FlatRange{155, 255}));
  EXPECT_EQ(r[0].weight_decay, 0.1);
  // embeddings: wte and wpe, adjacent, merged.
  EXPECT_EQ(r[1].name, "embeddings");
  ASSERT_EQ(r[1].ranges.size(), 1u);
  EXPECT_EQ(r[1].ranges[0], (FlatRange{0, 55}));
  EXPECT_EQ(r[2].name, "biases");
  EXPECT_EQ(r[2].weight_decay, 0.0);
  EXPECT_EQ(r[2].elems, 5u + 15 + 20 + 5);
  EXPECT_EQ(r[3].name, "norms");
  EXPECT_EQ(r[3].elems, 10u);
  EXPECT_TRUE(ResolveParamGroups(*layout, ParamGroups::Single(), 0.1).empty());
  // The spans cover the flat space, padding with the optimizer's settings.
  const std::vector<GroupSpan> spans =
      GroupSpans(r, layout->total_elems(), 0.1);
  uint64_t at = 0;
  for (const GroupSpan& s : spans) {
    EXPECT_EQ(s.range.begin, at);
    at = s.range.end;
  }
  EXPECT_EQ(at, layout->total_elems());
  EXPECT_EQ(spans.back().range, (FlatRange{285, layout->total_elems()}));
  EXPECT_EQ(spans.back().weight_decay, 0.1);
}

TEST(ParamGroupsGoldenTest, EveryKernelMatchesTorchBitForBit) {
  const Golden g = LoadGolden();
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(g.manifest, 1, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const uint64_t total = layout->total_elems();
  for (const AdamKernel& kernel : AvailableAdamKernels()) {
    for (const GoldenCase& c : g.cases) {
      SCOPED_TRACE(absl::StrCat(kernel.name, " ", c.name));
      const std::vector<GroupSpan> spans = GroupSpans(
          ResolveParamGroups(*layout, c.groups, c.config.weight_decay), total,
          c.config.weight_decay);
      std::vector<float> w = Floats(c.data.at("param0"));
      const size_t n = w.size();
      ASSERT_EQ(n, layout->param_elems());
      w.resize(total, 0.0f);
      std::vector<float> m(total, 0.0f), v(total, 0.0f);
      std::vector<uint16_t> mirror(total, 0);
      for (const auto& st : c.data.at("steps")) {
        const uint64_t t = st.at("t");
        std::vector<float> g32;
        std::vector<uint16_t> g16;
        if (c.bf16) {
          g16 = st.at("grad").get<std::vector<uint16_t>>();
          g16.resize(total, 0);
        } else {
          g32 = Floats(st.at("grad"));
          g32.resize(total, 0.0f);
        }
        for (const GroupSpan& s : spans) {
          const size_t at = s.range.begin;
          const GradView grad = c.bf16 ? GradView::Bf16(g16.data() + at)
                                       : GradView::Fp32(g32.data() + at);
          kernel.fn(MakeAdamStep(c.config, t, c.coefficient, s.weight_decay,
                                 s.lr_scale),
                    grad,
                    {w.data() + at, m.data() + at, v.data() + at,
                     mirror.data() + at, s.range.size()});
        }
        SCOPED_TRACE(absl::StrCat("t ", t));
        ASSERT_EQ(DiffBits(w, Floats(st.at("param")), "param"), "");
        ASSERT_EQ(DiffBits(m, Floats(st.at("exp_avg")), "exp_avg"), "");
        ASSERT_EQ(DiffBits(v, Floats(st.at("exp_avg_sq")), "exp_avg_sq"), "");
        for (size_t i = 0; i < total; ++i) {
          ASSERT_EQ(mirror[i], FloatToBf16(w[i])) << i;
        }
      }
    }
  }
}

// The torch groups differ from one group: the test above can tell them apart.
TEST(ParamGroupsGoldenTest, HuggingFaceDefaultIsNotTheSingleGroup) {
  const Golden g = LoadGolden();
  ASSERT_GE(g.cases.size(), 2u);
  EXPECT_EQ(g.cases[0].name, "adamw_hf_default");
  EXPECT_EQ(g.cases[1].name, "adamw_single");
  const json& a = g.cases[0].data.at("steps").back().at("param");
  const json& b = g.cases[1].data.at("steps").back().at("param");
  EXPECT_NE(a, b);
}

// Two servers, each Init carrying the groups as ranges (as ShardClient::Init
// sends them), the flat space split between them mid-tensor; pushes in two
// pieces per server.
TEST(ParamGroupsGoldenTest, TwoServersMatchTorchBitForBit) {
  const Golden g = LoadGolden();
  constexpr uint32_t kServers = 2;
  absl::StatusOr<FlatLayout> layout =
      FlatLayout::Create(g.manifest, kServers, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  for (const GoldenCase& c : g.cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> param0 = Floats(c.data.at("param0"));
    std::vector<std::unique_ptr<ModelShard>> shards;
    for (uint32_t k = 0; k < kServers; ++k) {
      v1::InitRequest init = testing::MakeInit(ToProto(g.manifest), kServers,
                                               k, /*seed=*/1, /*chunk=*/64);
      *init.mutable_optimizer() = ToProto(c.config);
      AddParamGroups(
          ResolveParamGroups(*layout, c.groups, c.config.weight_decay),
          init.mutable_optimizer());
      EXPECT_EQ(init.optimizer().param_groups_size(), c.groups.single ? 0 : 4);
      absl::StatusOr<std::unique_ptr<ModelShard>> shard =
          ModelShard::Create(init, {k, kServers}, Placement::kHost);
      ASSERT_TRUE(shard.ok()) << shard.status();
      const FlatRange own = (*shard)->owned();
      std::vector<float> w(own.size(), 0.0f), zero(own.size(), 0.0f);
      for (uint64_t i = own.begin; i < own.end && i < param0.size(); ++i) {
        w[i - own.begin] = param0[i];
      }
      ASSERT_TRUE((*shard)->RestoreState(0, 0, w.data(),
                                         {zero.data(), zero.data()}).ok());
      shards.push_back(*std::move(shard));
    }
    ASSERT_LT(shards[0]->owned().end, param0.size()) << "split mid-model";
    uint64_t step = 0;
    for (const auto& st : c.data.at("steps")) {
      SCOPED_TRACE(absl::StrCat("t ", st.at("t").get<int>()));
      std::vector<float> g32;
      std::vector<uint16_t> g16;
      if (c.bf16) {
        g16 = st.at("grad").get<std::vector<uint16_t>>();
        g16.resize(layout->total_elems(), 0);
      } else {
        g32 = Floats(st.at("grad"));
        g32.resize(layout->total_elems(), 0.0f);
      }
      const DType dtype = c.bf16 ? DType::kBf16 : DType::kFp32;
      std::vector<float> got;
      for (const auto& shard : shards) {
        const FlatRange own = shard->owned();
        const uint64_t mid = own.begin + 37;  // not a tensor boundary
        std::vector<GradPiece> pieces;
        for (const FlatRange r : {FlatRange{own.begin, mid}, FlatRange{mid, own.end}}) {
          const void* data = c.bf16 ? static_cast<const void*>(g16.data() + r.begin)
                                    : static_cast<const void*>(g32.data() + r.begin);
          pieces.push_back({r, dtype, data});
        }
        absl::StatusOr<ApplyResult> r =
            shard->ApplyPush(step, {c.coefficient, false}, pieces);
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_EQ(r->applied_elems, own.size());
        const testing::ShardState s = testing::ReadState(*shard);
        got.insert(got.end(), s.arrays[0].begin(), s.arrays[0].end());
      }
      ++step;
      ASSERT_EQ(DiffBits(got, Floats(st.at("param")), "param"), "");
      std::vector<float> m, v;
      for (const auto& shard : shards) {
        const testing::ShardState s = testing::ReadState(*shard);
        m.insert(m.end(), s.arrays[1].begin(), s.arrays[1].end());
        v.insert(v.end(), s.arrays[2].begin(), s.arrays[2].end());
      }
      ASSERT_EQ(DiffBits(m, Floats(st.at("exp_avg")), "exp_avg"), "");
      ASSERT_EQ(DiffBits(v, Floats(st.at("exp_avg_sq")), "exp_avg_sq"), "");
    }
  }
}

// ---- The server's table.

v1::OptimizerConfig WithGroups(
    std::initializer_list<std::tuple<const char*, double, double,
                                     std::vector<FlatRange>>> groups) {
  v1::OptimizerConfig o;
  o.set_weight_decay(0.1);
  for (const auto& [name, wd, scale, ranges] : groups) {
    AddParamGroups({ResolvedGroup{name, wd, scale, ranges, 0}}, &o);
  }
  return o;
}

TEST(ParamGroupTableTest, SplitsAtGroupBoundariesInsideTheOwnedRange) {
  absl::StatusOr<ParamGroupTable> t = ParamGroupTable::Create(
      WithGroups({{"a", 0.0, 2.0, {{10, 20}, {40, 50}}},
                  {"b", 0.5, 1.0, {{20, 30}}}}),
      {15, 45}, 100);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<ParamGroupTable::Span> s = t->Split({15, 45});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].range, (FlatRange{15, 20}));
  EXPECT_EQ(s[0].lr_scale, 2.0);
  EXPECT_EQ(s[1].range, (FlatRange{20, 30}));
  EXPECT_EQ(s[1].weight_decay, 0.5);
  EXPECT_EQ(s[2].range, (FlatRange{30, 40}));  // no group: the optimizer's
  EXPECT_EQ(s[2].weight_decay, 0.1);
  EXPECT_EQ(s[2].lr_scale, 1.0);
  EXPECT_EQ(s[3].range, (FlatRange{40, 45}));
  ASSERT_EQ(t->Split({32, 35}).size(), 1u);
  EXPECT_EQ(t->Split({32, 35})[0].weight_decay, 0.1);
  // No groups: one span with the optimizer's settings.
  absl::StatusOr<ParamGroupTable> none =
      ParamGroupTable::Create(WithGroups({}), {0, 64}, 64);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_EQ(none->Split({3, 9}).size(), 1u);
}

TEST(ParamGroupTableTest, RefusesBadGroups) {
  struct Bad {
    v1::OptimizerConfig o;
    const char* says;
  };
  for (const Bad& b : {
           Bad{WithGroups({{"a", 0, 1, {{0, 10}}}, {"b", 0, 1, {{5, 12}}}}),
               "overlap"},
           Bad{WithGroups({{"a", 0, 1, {{0, 10}}}, {"a", 0, 1, {{20, 30}}}}),
               "unique"},
           Bad{WithGroups({{"a", 0, 1, {{90, 101}}}}), "outside"},
           Bad{WithGroups({{"a", -1, 1, {{0, 10}}}}), "weight_decay"},
           Bad{WithGroups({{"a", 0, std::nan(""), {{0, 10}}}}), "lr_scale"},
       }) {
    absl::StatusOr<ParamGroupTable> t = ParamGroupTable::Create(b.o, {0, 64}, 100);
    ASSERT_FALSE(t.ok()) << b.says;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(b.says), std::string::npos)
        << t.status();
  }
}

TEST(ParamGroupTableTest, InitRefusesBadGroups) {
  v1::InitRequest init = testing::MakeInit(testing::SmallManifest(1), 1, 0,
                                           /*seed=*/1, /*chunk=*/0);
  *init.mutable_optimizer() = WithGroups({{"a", 0, 1, {{0, 10}}},
                                          {"b", 0, 1, {{5, 12}}}});
  init.mutable_optimizer()->set_lr(1e-3);
  init.mutable_optimizer()->set_beta1(0.9);
  init.mutable_optimizer()->set_beta2(0.999);
  init.mutable_optimizer()->set_eps(1e-8);
  absl::StatusOr<std::unique_ptr<ModelShard>> shard =
      ModelShard::Create(init, {0, 1}, Placement::kHost);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("Init: optimizer.param_groups"),
            std::string::npos)
      << shard.status();
}

TEST(ParamGroupTableTest, CheckpointsCompareGroupsWithoutRanges) {
  v1::OptimizerConfig a = WithGroups({{"norms", 0, 1, {{0, 10}}}});
  v1::OptimizerConfig b = WithGroups({{"norms", 0, 1, {{64, 74}}}});
  v1::OptimizerConfig c = WithGroups({{"norms", 0.1, 1, {{0, 10}}}});
  auto same = [](const v1::OptimizerConfig& x, const v1::OptimizerConfig& y) {
    return OptimizerDifference(x, y).empty();
  };
  EXPECT_TRUE(same(a, b));   // another layout: same groups
  EXPECT_FALSE(same(a, c));  // another weight decay: refused
  EXPECT_FALSE(same(a, WithGroups({})));  // single vs groups: refused
  EXPECT_EQ(OptimizerDifference(a, c),
            "zeroshard.param_groups[0].weight_decay: 0 -> 0.1");
}

// The wire names every rule: the optimizer's by its registry name and a
// tensor rule by name with its params by keyword. Both convert back to what
// was sent; a checkpoint header in the older form (kind enums, a tensor
// rule's own fields) compares equal to the same optimizer named; a name or
// keyword this build does not know is refused.
TEST(ParamGroupTableTest, RulesTravelByNameAndTheOlderFormStillReads) {
  OptimizerConfig lion;
  lion.kind = OptimizerKind::kLion;
  lion.lr = 1e-4;
  const TensorRule muon = *MakeTensorRule("muon", {{"lr", 0.03}, {"nesterov", 0}});
  const TensorRule adafactor = *MakeTensorRule("adafactor", {});
  const TensorRule first_moment = *MakeTensorRule("adafactor", {{"beta1", 0.9}});
  v1::OptimizerConfig named = ToProto(lion);
  EXPECT_EQ(named.kind(), v1::OptimizerConfig::RULE);
  EXPECT_EQ(named.rule(), "lion");
  AddParamGroups({ResolvedGroup{"matrices", 0, 1, {{0, 64}}, 64, muon},
                  ResolvedGroup{"norms", 0, 1, {{64, 80}}, 16, adafactor},
                  ResolvedGroup{"biases", 0, 1, {{80, 96}}, 16, first_moment}},
                 &named);
  const v1::TensorRule& t = named.param_groups(0).tensor_rule();
  EXPECT_EQ(t.kind(), v1::TensorRule::NONE);
  EXPECT_EQ(t.name(), "muon");
  EXPECT_EQ(t.params().at("lr"), 0.03);
  EXPECT_EQ(t.params().at("nesterov"), 0.0);
  EXPECT_EQ(named.param_groups(1).tensor_rule().params().at("beta1"), -1.0);  // none
  EXPECT_EQ(named.param_groups(1).tensor_rule().params().at("eps[1]"), 1e-3);
  absl::StatusOr<OptimizerConfig> back = FromProto(named);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, lion);
  const std::vector<ResolvedGroup> groups = ParamGroupsFromProto(named);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].rule, muon);
  EXPECT_EQ(groups[1].rule, adafactor);
  EXPECT_EQ(groups[2].rule, first_moment);

  // The older form of the same: equal to it, and a real change named.
  v1::OptimizerConfig older = named;
  older.set_kind(v1::OptimizerConfig::LION);
  older.clear_rule();
  v1::TensorRule* o = older.mutable_param_groups(0)->mutable_tensor_rule();
  o->Clear();
  o->set_kind(v1::TensorRule::MUON);
  o->set_lr(0.03);
  o->set_momentum(0.95);
  o->set_nesterov(false);
  EXPECT_EQ(OptimizerDifference(older, named), "");
  // The first named form's spellings read as today's: bf16_products for
  // ns_precision, eps1 and eps2 for eps, beta1 absent for none.
  v1::TensorRule first;
  first.set_name("adafactor");
  (*first.mutable_params())["eps1"] = 1e-30;
  (*first.mutable_params())["eps2"] = 2e-3;
  EXPECT_EQ(TensorRuleFromProto(first),
            *MakeTensorRule("adafactor", {{"eps[1]", 2e-3}}));
  first.Clear();
  first.set_name("muon");
  (*first.mutable_params())["bf16_products"] = 1;
  EXPECT_EQ(TensorRuleFromProto(first).Param("ns_precision"), 1);
  v1::OptimizerConfig adamw = named;
  adamw.set_rule("adamw");
  EXPECT_EQ(OptimizerDifference(older, adamw), "optimizer.type: Lion -> AdamW");

  for (const auto& [name, key] : std::vector<std::pair<std::string, std::string>>{
           {"shampoo", "lr"}, {"muon", "betas"}, {"adafactor", "eps[2]"}}) {
    v1::OptimizerConfig bad = named;
    v1::TensorRule* r = bad.mutable_param_groups(0)->mutable_tensor_rule();
    r->set_name(name);
    (*r->mutable_params())[key] = 1;
    EXPECT_FALSE(ParseTensorRuleProto(*r).ok()) << name << " " << key;
    absl::StatusOr<ParamGroupTable> table = ParamGroupTable::Create(bad, {0, 96}, 96);
    ASSERT_FALSE(table.ok());
    EXPECT_NE(table.status().message().find(name == "muon" ? key : name),
              std::string::npos) << table.status();
  }
}

}  // namespace
}  // namespace zeroshard
