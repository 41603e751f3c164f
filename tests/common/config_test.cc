// TrainingConfig parsing: every example parses cleanly, DeepSpeed's batch
// rule and "auto" resolution, scheduler mapping, warnings for unknown keys,
// errors that name the key, and the canonical form / fingerprint.
#include "common/config.h"
#include "common/resolved_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

constexpr char kMinimal[] = R"({"train_micro_batch_size_per_gpu": 4})";

ParsedConfig MustParse(const std::string& text, const ConfigOverrides& ov = {}) {
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(text, ov);
  EXPECT_TRUE(p.ok()) << p.status() << "\n" << text;
  return p.ok() ? *p : ParsedConfig{};
}

// Expects INVALID_ARGUMENT whose message contains every one of `needles`.
void ExpectError(const std::string& text, std::vector<std::string> needles,
                 absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(text);
  ASSERT_FALSE(p.ok()) << "parsed unexpectedly: " << text;
  EXPECT_EQ(p.status().code(), code) << p.status();
  for (const std::string& n : needles) {
    EXPECT_NE(p.status().message().find(n), std::string::npos)
        << "message lacks \"" << n << "\": " << p.status().message();
  }
}

// The examples name no unknown key; DeepSpeed keys without effect here are
// named in at most one warning.
TEST(ConfigTest, EveryExampleParsesWithoutUnknownKeys) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator("examples")) {
    // examples/torch: the PyTorch front-end's configs, whose zeroshard.units
    // the front-end reads (and removes) before this parser sees them; they
    // run in tests/python/test_examples.py.
    if (e.path().parent_path() == "examples/torch") continue;
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  ASSERT_GE(files.size(), 9u) << "expected examples/*.json and examples/deepspeed/*.json";
  for (const std::string& f : files) {
    absl::StatusOr<ParsedConfig> p = LoadTrainingConfig(f);
    ASSERT_TRUE(p.ok()) << p.status();
    int no_effect = 0;
    for (const std::string& w : p->warnings) {
      EXPECT_EQ(w.find("unknown"), std::string::npos) << w;
      no_effect += w.find("no effect") != std::string::npos;
    }
    EXPECT_LE(no_effect, 1) << f;
    // zeroshard's own examples (the main job's among them) hold only keys
    // that take effect: they run without a warning.
    if (std::filesystem::path(f).parent_path() == "examples") {
      EXPECT_TRUE(p->warnings.empty()) << f << ": " << absl::StrJoin(p->warnings, "\n");
    }
    const TrainingConfig& c = p->config;
    EXPECT_EQ(c.train_batch_size,
              c.micro_batch_size * c.gradient_accumulation_steps * c.cluster.workers)
        << f;
    EXPECT_TRUE(ValidateTrainingConfig(c).ok()) << f;
  }
}

TEST(ConfigTest, MainDemoResolves) {
  absl::StatusOr<ParsedConfig> p = LoadTrainingConfig("examples/gpt-small.json");
  ASSERT_TRUE(p.ok()) << p.status();
  const TrainingConfig& c = p->config;
  EXPECT_EQ(c.precision, Precision::kBf16);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.cluster.servers, 2);
  EXPECT_EQ(c.cluster.workers, 2);
  EXPECT_TRUE(ValidateModelShape(c.cluster.model).ok());
  // "auto" gas derived from train_batch_size / (micro * workers).
  EXPECT_EQ(c.gradient_accumulation_steps, c.train_batch_size / (c.micro_batch_size * 2));
  // "auto" total_num_steps is the run's step count; data seed defaults to seed.
  EXPECT_EQ(c.optimizer.schedule, LrScheduleKind::kWarmupCosine);
  EXPECT_EQ(c.optimizer.total_steps, c.cluster.steps);
  EXPECT_EQ(c.cluster.data.seed, c.cluster.seed);
  EXPECT_DOUBLE_EQ(c.optimizer.min_lr, c.optimizer.lr * 0.1);
}

TEST(ConfigTest, ExampleVariantsDifferWhereIntended) {
  auto load = [](const char* f) { return LoadTrainingConfig(f)->config; };
  const TrainingConfig base = load("examples/gpt-small.json");
  const TrainingConfig fp16 = load("examples/gpt-small-fp16.json");
  const TrainingConfig stage2 = load("examples/gpt-small-stage2.json");
  const TrainingConfig accum = load("examples/gpt-small-accum.json");
  const TrainingConfig q8 = load("examples/gpt-small-adamw8bit.json");
  EXPECT_EQ(q8.optimizer.kind, OptimizerKind::kAdamW8bit);
  EXPECT_EQ(q8.optimizer.lr, base.optimizer.lr);
  EXPECT_EQ(q8.optimizer.beta2, base.optimizer.beta2);
  EXPECT_EQ(fp16.precision, Precision::kFp16);
  EXPECT_EQ(fp16.fp16.loss_scale, 0);  // dynamic
  EXPECT_EQ(stage2.zero.stage, 2);
  EXPECT_EQ(accum.gradient_accumulation_steps, 4);
  EXPECT_EQ(accum.train_batch_size, base.train_batch_size);
}

// zeroshard.model's Llama keys: read, named in errors, written in the
// resolved config only for an architecture that has them (GPT-2's canonical
// form is what it was), and refused by GPT-2.
TEST(ConfigTest, LlamaKeysAreReadCheckedAndResolved) {
  absl::StatusOr<ParsedConfig> p = LoadTrainingConfig("examples/llama-small.json");
  ASSERT_TRUE(p.ok()) << p.status();
  const ModelShape& m = p->config.cluster.model;
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_EQ(m.mlp_width, 320);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_FALSE(m.tie_embeddings);
  absl::StatusOr<TrainingConfig> back = ParseResolvedConfig(ResolvedConfigJson(p->config));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->cluster.model, m);
  EXPECT_EQ(ConfigFingerprint(*back), ConfigFingerprint(p->config));
  const TrainingConfig gpt = LoadTrainingConfig("examples/gpt-small.json")->config;
  EXPECT_EQ(ResolvedConfigJson(gpt).find("kv_heads"), std::string::npos);
  for (const auto& [model, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kv_heads": 0})", "zeroshard.model.kv_heads"},
           {R"({"rope_theta": 1})", "zeroshard.model.rope_theta"},
           {R"({"norm_eps": "small"})", "zeroshard.model.norm_eps"},
           {R"({"tie_embeddings": 1})", "zeroshard.model.tie_embeddings"}}) {
    absl::StatusOr<ParsedConfig> bad = ParseTrainingConfig(absl::StrCat(
        R"({"train_batch_size": 4, "zeroshard": {"model": )", model, "}}"));
    ASSERT_FALSE(bad.ok()) << model;
    EXPECT_NE(bad.status().message().find(key), std::string::npos) << bad.status();
  }
}

TEST(ConfigTest, MinimalConfigTakesDefaults) {
  ParsedConfig p = MustParse(kMinimal);
  EXPECT_TRUE(p.warnings.empty());
  const TrainingConfig& c = p.config;
  EXPECT_EQ(c.precision, Precision::kFp32);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.micro_batch_size, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.train_batch_size, 4);
  EXPECT_EQ(c.gradient_clipping, 0);
  EXPECT_EQ(c.optimizer, OptimizerConfig{});
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1);
  EXPECT_EQ(c.cluster.model.arch, "gpt2");
}

// zeroshard.model.arch names the architecture: kept as given (which names
// exist is model/arch.h's registry, asked by the programs), in the canonical
// JSON, and a value that is not a name is an error naming the key.
TEST(ConfigTest, ModelArchIsANameKeptInTheCanonicalJson) {
  ParsedConfig p = MustParse(
      R"({"train_micro_batch_size_per_gpu": 1,
          "zeroshard": {"model": {"arch": "llama", "layers": 2}}})");
  EXPECT_EQ(p.config.cluster.model.arch, "llama");
  EXPECT_EQ(p.config.cluster.model.layers, 2);
  EXPECT_NE(CanonicalJson(p.config).find("\"arch\":\"llama\""),
            std::string::npos)
      << CanonicalJson(p.config);
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "zeroshard": {"model": {"arch": 2}}})",
              {"zeroshard.model.arch", "a string"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "zeroshard": {"model": {"arch": "Llama 3"}}})",
              {"model arch 'Llama 3'"});
}

TEST(ConfigTest, UnknownKeysWarnWithFullPath) {
  ParsedConfig p = MustParse(R"({
    "train_micro_batch_size_per_gpu": 1, "mystery": 1,
    "zero_optimization": {"stage": 2, "foo": true, "offload_optimizer": {"bar": 1}},
    "zeroshard": {"model": {"depth": 3}, "checkpoint": {"pem": "x"}, "tls": {"ca": "x"}},
    "activation_checkpointing": {"partition_activations": true, "qux": 0}})");
  // zeroshard.tls is no longer read (credentials live in a directory): the
  // whole section is one unknown key.
  std::vector<std::string> want = {"\"mystery\"", "\"zero_optimization.foo\"",
                                   "\"zero_optimization.offload_optimizer.bar\"",
                                   "\"zeroshard.model.depth\"", "\"zeroshard.checkpoint.pem\"",
                                   "\"zeroshard.tls\"", "\"activation_checkpointing.qux\""};
  // One warning: the DeepSpeed keys without effect, then the unknown ones.
  ASSERT_EQ(p.warnings.size(), 1u);
  const std::string& w = p.warnings[0];
  const size_t unknown_at = w.find("unknown config keys");
  ASSERT_NE(unknown_at, std::string::npos) << w;
  for (const std::string& k : want) {
    EXPECT_GT(w.find(k), unknown_at) << "not named as unknown: " << k << " in " << w;
  }
  EXPECT_LT(w.find("\"zero_optimization.offload_optimizer\""), unknown_at) << w;
  EXPECT_LT(w.find("\"activation_checkpointing.partition_activations\""), unknown_at) << w;
  EXPECT_EQ(p.config.zero.stage, 2);
  EXPECT_TRUE(p.config.activation_checkpointing.partition_activations);
}

// A typo'd key is named with the known key nearest to it; a key nowhere
// near any is named alone.
TEST(ConfigTest, ATypoSuggestsTheNearestKnownKey) {
  ParsedConfig p = MustParse(R"({
    "train_micro_batch_size_per_gpu": 1, "gradient_clippin": 1.0, "mystery": 1,
    "zero_optimization": {"stag": 2},
    "zeroshard": {"stesp": 5, "model": {"Layers": 3}}})");
  ASSERT_EQ(p.warnings.size(), 1u);
  const std::string& w = p.warnings[0];
  for (const char* want :
       {"\"gradient_clippin\" (did you mean \"gradient_clipping\"?)",
        "\"zero_optimization.stag\" (did you mean \"zero_optimization.stage\"?)",
        "\"zeroshard.stesp\" (did you mean \"zeroshard.steps\"?)",
        "\"zeroshard.model.Layers\" (did you mean \"zeroshard.model.layers\"?)"}) {
    EXPECT_NE(w.find(want), std::string::npos) << want << " in " << w;
  }
  EXPECT_NE(w.find("\"mystery\""), std::string::npos) << w;
  EXPECT_EQ(w.find("\"mystery\" (did you mean"), std::string::npos) << w;
}

TEST(ConfigTest, BadValuesNameTheKey) {
  ExpectError(R"({"train_batch_size": "lots"})", {"train_batch_size", "integer"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 0})", {"train_micro_batch_size_per_gpu"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 2.5})", {"train_micro_batch_size_per_gpu"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": "3"}})",
              {"zero_optimization.stage"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 4}})",
              {"zero_optimization.stage", "[1, 3]"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"hysteresis": 0}})",
              {"fp16.hysteresis"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": 1}})",
              {"bf16.enabled", "true, false"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "RMSprop"}})",
              {"optimizer.type", "AdamW", "SGD", "Adagrad"});
  // bitsandbytes' switches for other algorithms keep their defaults.
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"type": "AdamW8bit", "params": {"amsgrad": true}}})",
              {"optimizer.params.amsgrad", "false"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"type": "Adam8bit", "params": {"block_wise": false}}})",
              {"optimizer.params.block_wise", "2048"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"type": "AdamW8bit", "params": {"percentile_clipping": 5}}})",
              {"optimizer.params.percentile_clipping", "gradient_clipping"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"type": "AdamW8bit", "params": {"optim_bits": 32}}})",
              {"optimizer.params.optim_bits", "\"AdamW\""});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "optimizer": {"params": {"betas": [0.9]}}})",
              {"optimizer.params.betas"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"placement": "gpu"}})",
              {"zeroshard.placement", "pinned"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"model": {"heads": 3}}})",
              {"zeroshard.model"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"model": {"vocab": 100}}})",
              {"zeroshard.model.vocab", "256"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"chunk_elems": 100}})",
              {"zeroshard.chunk_elems", "64"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"metrics": {"format": "xml"}}})",
              {"zeroshard.metrics.format", "jsonl"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"servers": ["a:1", 2]}})",
              {"zeroshard.servers"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": "x"})",
              {"zeroshard", "object"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": -1})",
              {"gradient_clipping"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "zeroshard": {"activation_checkpointing": {"policy": "sometimes"}}})",
              {"zeroshard.activation_checkpointing.policy", "every_k"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "fp16": {"enabled": true, "initial_scale_power": 2, "min_loss_scale": 8}})",
              {"fp16.min_loss_scale"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zeroshard": {"replicas": 3}})",
              {"zeroshard.replicas"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "zeroshard": {"replica_check_every_steps": -1}})",
              {"zeroshard.replica_check_every_steps"});
  // A slot's second copy lives on the next server: one server has none.
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
                  "zeroshard": {"replicas": 2, "servers": 1}})",
              {"zeroshard.replicas", "at least 2 servers", "has 1"});
  ExpectError("{not json", {"not valid JSON"});
  ExpectError("[1, 2]", {"object"});
}

TEST(ConfigTest, StageZeroIsRejectedWithReason) {
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0}})",
              {"zero_optimization.stage", "not supported", "1, 2 or 3"});
}

TEST(ConfigTest, PrecisionChoice) {
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
                  "fp16": {"enabled": true}})",
              {"bf16.enabled", "fp16.enabled"});
  EXPECT_EQ(MustParse(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": false}})")
                .config.precision,
            Precision::kFp32);
  ParsedConfig f = MustParse(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": true, "loss_scale": 128, "initial_scale_power": 12,
               "loss_scale_window": 50, "hysteresis": 3, "min_loss_scale": 0.25}})");
  EXPECT_EQ(f.config.precision, Precision::kFp16);
  EXPECT_EQ(f.config.fp16.loss_scale, 128);
  EXPECT_EQ(f.config.fp16.initial_scale_power, 12);
  EXPECT_EQ(f.config.fp16.loss_scale_window, 50);
  EXPECT_EQ(f.config.fp16.hysteresis, 3);
  EXPECT_EQ(f.config.fp16.min_loss_scale, 0.25);
}

TEST(ConfigTest, CommunicationDataType) {
  const ParsedConfig absent = MustParse(kMinimal);
  EXPECT_EQ(absent.config.communication_data_type, CommDataType::kFp32);
  EXPECT_TRUE(absent.warnings.empty());
  const ParsedConfig bf16 = MustParse(
      R"({"train_micro_batch_size_per_gpu": 4, "communication_data_type": "BF16"})");
  EXPECT_EQ(bf16.config.communication_data_type, CommDataType::kBf16);
  EXPECT_TRUE(bf16.warnings.empty());
  EXPECT_EQ(MustParse(R"({"train_micro_batch_size_per_gpu": 4,
                          "communication_data_type": "fp32"})")
                .config.communication_data_type,
            CommDataType::kFp32);
  // Workers must agree on it: it is part of the canonical form.
  EXPECT_NE(CanonicalJson(absent.config), CanonicalJson(bf16.config));
  ExpectError(R"({"train_micro_batch_size_per_gpu": 4, "communication_data_type": "fp16"})",
              {"communication_data_type", "fp16", "bf16"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 4, "communication_data_type": 16})",
              {"communication_data_type"});
  ExpectError(R"({"train_micro_batch_size_per_gpu": 4, "communication_data_type": "int8"})",
              {"communication_data_type", "int8"});
}

struct BatchCase {
  std::string tbs, mbs, gas;  // JSON literal or "" for absent
  int workers;
  int want_tbs, want_mbs, want_gas;  // want_tbs 0 = expect an error
};

// A batch size the workers cannot share says how to fix it: the nearest
// sizes that divide, and the worker counts that divide it.
TEST(ConfigTest, AnIndivisibleBatchNamesTheFixes) {
  absl::StatusOr<ParsedConfig> p =
      ParseTrainingConfig(R"({"train_batch_size": 16})", {.workers = 24});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find(
                "is not divisible by 24 to derive \"train_micro_batch_size_per_gpu\""),
            std::string::npos)
      << p.status();
  EXPECT_NE(p.status().message().find(
                "use train_batch_size 24, or --workers=1, 2, 4, 8, 16"),
            std::string::npos)
      << p.status();
  p = ParseTrainingConfig(
      R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})",
      {.workers = 2});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("use train_batch_size 24 or 32"),
            std::string::npos)
      << p.status();
}

// Without a zeroshard.metrics section a run writes the README's
// metrics.csv and loss.svg; a JSON Lines format alone names its file.
TEST(ConfigTest, MetricsAndPlotByDefault) {
  ParsedConfig p = MustParse(kMinimal);
  EXPECT_EQ(p.config.cluster.metrics_path, "metrics.csv");
  EXPECT_EQ(p.config.cluster.plot_path, "loss.svg");
  p = MustParse(R"({"train_micro_batch_size_per_gpu": 4,
                    "zeroshard": {"metrics": {"format": "jsonl"}, "plot": ""}})");
  EXPECT_EQ(p.config.cluster.metrics_path, "metrics.jsonl");
  EXPECT_EQ(p.config.cluster.plot_path, "");
}

TEST(ConfigTest, DeepSpeedBatchRule) {
  const std::vector<BatchCase> cases = {
      {"32", "4", "4", 2, 32, 4, 4},      {"32", "4", "", 2, 32, 4, 4},
      {"32", "4", "\"auto\"", 2, 32, 4, 4}, {"32", "", "2", 2, 32, 8, 2},
      {"\"auto\"", "4", "3", 2, 24, 4, 3}, {"", "4", "", 3, 12, 4, 1},
      {"12", "", "", 3, 12, 4, 1},         {"32", "4", "3", 2, 0, 0, 0},
      {"30", "4", "", 2, 0, 0, 0},         {"30", "", "4", 2, 0, 0, 0},
      // Neither the total nor the micro batch: the micro batch defaults to 8.
      {"", "", "4", 2, 64, 8, 4},          {"\"auto\"", "\"auto\"", "", 1, 8, 8, 1},
      {"\"auto\"", "\"auto\"", "\"auto\"", 2, 16, 8, 1},
  };
  for (const BatchCase& bc : cases) {
    std::string text = "{";
    auto add = [&](const char* key, const std::string& v) {
      if (v.empty()) return;
      absl::StrAppend(&text, text.size() > 1 ? "," : "", "\"", key, "\":", v);
    };
    add("train_batch_size", bc.tbs);
    add("train_micro_batch_size_per_gpu", bc.mbs);
    add("gradient_accumulation_steps", bc.gas);
    text += "}";
    absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(text, {.workers = bc.workers});
    if (bc.want_tbs == 0) {
      EXPECT_FALSE(p.ok()) << text << " workers=" << bc.workers;
      if (!p.ok()) {
        EXPECT_NE(p.status().message().find("train_"), std::string::npos) << p.status();
      }
      continue;
    }
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    EXPECT_EQ(p->config.train_batch_size, bc.want_tbs) << text;
    EXPECT_EQ(p->config.micro_batch_size, bc.want_mbs) << text;
    EXPECT_EQ(p->config.gradient_accumulation_steps, bc.want_gas) << text;
  }
}

TEST(ConfigTest, InconsistentTripleNamesAllKeys) {
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(
      R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2,
          "gradient_accumulation_steps": 2, "zeroshard": {"workers": 2}})");
  ASSERT_FALSE(p.ok());
  for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps", "world_size"}) {
    EXPECT_NE(p.status().message().find(k), std::string::npos) << p.status();
  }
}

TEST(ConfigTest, OverridesApplyBeforeAutoResolution) {
  const std::string text = R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
      "scheduler": {"type": "WarmupCosineLR",
                    "params": {"warmup_num_steps": 5, "warmup_type": "linear"}},
      "zeroshard": {"workers": 2, "servers": 3, "steps": 50}})";
  ParsedConfig a = MustParse(text);
  EXPECT_EQ(a.config.gradient_accumulation_steps, 4);
  EXPECT_EQ(a.config.optimizer.total_steps, 50u);
  ParsedConfig b = MustParse(text, {.servers = 1, .workers = 4, .steps = 20});
  EXPECT_EQ(b.config.cluster.workers, 4);
  EXPECT_EQ(b.config.cluster.servers, 1);
  EXPECT_EQ(b.config.gradient_accumulation_steps, 2);
  EXPECT_EQ(b.config.optimizer.total_steps, 20u);
  EXPECT_EQ(b.config.cluster.steps, 20u);
}

TEST(ConfigTest, OptimizerKindsFollowDeepSpeed) {
  auto kind = [](const std::string& opt) {
    return MustParse(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": )" + opt + "}")
        .config.optimizer;
  };
  EXPECT_EQ(kind(R"({"type": "adam"})").kind, OptimizerKind::kAdamW);
  OptimizerConfig l2 = kind(R"({"type": "Adam", "params": {"adam_w_mode": false}})");
  EXPECT_EQ(l2.kind, OptimizerKind::kAdam);
  EXPECT_EQ(l2.weight_decay, 0.0);
  OptimizerConfig w = kind(R"({"type": "ADAMW", "params": {"lr": 0.5, "betas": [0.8, 0.9],
      "eps": 1e-6, "weight_decay": 0.1}})");
  EXPECT_EQ(w.kind, OptimizerKind::kAdamW);
  EXPECT_EQ(w.lr, 0.5);
  EXPECT_EQ(w.beta1, 0.8);
  EXPECT_EQ(w.beta2, 0.9);
  EXPECT_EQ(w.eps, 1e-6);
  EXPECT_EQ(w.weight_decay, 0.1);
  ExpectError(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})",
              {"adam_w_mode"});
  // bitsandbytes' names and defaults (AdamW8bit: weight decay 1e-2; Adam8bit:
  // none); the Paged names are the same rules.
  OptimizerConfig q = kind(R"({"type": "AdamW8bit"})");
  EXPECT_EQ(q.kind, OptimizerKind::kAdamW8bit);
  EXPECT_EQ(q.lr, 1e-3);
  EXPECT_EQ(q.weight_decay, 1e-2);
  EXPECT_EQ(kind(R"({"type": "pagedadamw8bit"})").kind, OptimizerKind::kAdamW8bit);
  OptimizerConfig a8 = kind(R"({"type": "Adam8bit", "params": {"lr": 2e-4,
      "betas": [0.8, 0.95], "eps": 1e-7, "min_8bit_size": 4096}})");
  EXPECT_EQ(a8.kind, OptimizerKind::kAdam8bit);
  EXPECT_EQ(a8.weight_decay, 0.0);
  EXPECT_EQ(a8.lr, 2e-4);
  EXPECT_EQ(a8.beta2, 0.95);
  EXPECT_EQ(a8.eps, 1e-7);
  EXPECT_EQ(kind(R"({"type": "PagedAdam8bit"})").kind, OptimizerKind::kAdam8bit);
}

TEST(ConfigTest, ZeroshardSection) {
  ParsedConfig p = MustParse(R"({"train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "none", "pin_memory": true},
                          "reduce_bucket_size": 2e6, "allgather_bucket_size": "auto"},
    "zeroshard": {"servers": ["10.0.0.1:7000", "10.0.0.2:7000"], "workers": 1,
      "placement": "Pinned", "data": {"paths": ["a.txt", "b.txt"], "seed": 9,
      "validation_fraction": 0.1}, "seed": 3, "chunk_elems": 4096,
      "metrics": {"path": "m.jsonl", "format": "JSONL"}, "plot": "loss.svg",
      "checkpoint": {"dir": "/tmp/ck", "every_steps": 25, "keep_last": 4},
      "credentials": "/etc/zeroshard",
      "timeouts": {"step_seconds": 30},
      "activation_checkpointing": {"policy": "every_k", "k": 2},
      "replicas": 2, "replica_check_every_steps": 3,
      "max_overflows_at_min_scale": 3}})");
  // offload_optimizer and the bucket sizes have no effect here: one warning.
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("no effect"), std::string::npos) << p.warnings[0];
  EXPECT_EQ(p.warnings[0].find("unknown"), std::string::npos) << p.warnings[0];
  const TrainingConfig& c = p.config;
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(c.zero.offload_optimizer, OffloadDevice::kNone);
  EXPECT_TRUE(c.zero.offload_pin_memory);
  EXPECT_EQ(c.zero.reduce_bucket_size, 2000000u);
  EXPECT_EQ(c.cluster.servers, 2);
  EXPECT_EQ(c.cluster.server_addresses[1], "10.0.0.2:7000");
  EXPECT_EQ(c.cluster.checkpoint.dir, "/tmp/ck");
  EXPECT_EQ(c.cluster.checkpoint.every_steps, 25u);
  EXPECT_EQ(c.cluster.checkpoint.keep_last, 4);
  EXPECT_EQ(c.cluster.placement, Placement::kPinned);
  EXPECT_EQ(c.cluster.data.paths.size(), 2u);
  EXPECT_EQ(c.cluster.data.seed, 9u);
  EXPECT_EQ(c.cluster.seed, 3u);
  EXPECT_EQ(c.cluster.metrics_format, MetricsFormat::kJsonl);
  EXPECT_EQ(c.cluster.credentials, "/etc/zeroshard");
  EXPECT_EQ(c.cluster.step_timeout_s, 30);
  EXPECT_EQ(c.activation_checkpointing.policy, CheckpointPolicy::kEveryK);
  EXPECT_EQ(c.activation_checkpointing.k, 2);
  EXPECT_EQ(c.cluster.max_overflows_at_min_scale, 3);
  EXPECT_EQ(c.cluster.replicas, 2);
  EXPECT_EQ(c.cluster.replica_check_every_steps, 3u);
  EXPECT_EQ(MustParse(R"({"train_micro_batch_size_per_gpu": 1})")
                .config.cluster.replica_check_every_steps,
            10u);
  // Secrets are refused in the file, pointing at the credentials directory.
  absl::StatusOr<ParsedConfig> secret = ParseTrainingConfig(
      R"({"train_micro_batch_size_per_gpu": 1,
          "zeroshard": {"admin_token": "t0k3n"}})", {});
  ASSERT_FALSE(secret.ok());
  EXPECT_NE(secret.status().message().find("zeroshard.credentials"),
            absl::string_view::npos)
      << secret.status();
  // An address list fixes the server count.
  EXPECT_FALSE(ParseTrainingConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "zeroshard": {"servers": ["a:1"]}})", {.servers = 2}).ok());
}

TEST(ConfigTest, CanonicalFormIgnoresLayoutAndHostLocalFields) {
  const std::string a = R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
      "zeroshard": {"workers": 2, "metrics": {"path": "a.csv"}, "credentials": "/a"}})";
  const std::string b = R"({"zeroshard": {"credentials": "/b", "workers": 2},
      "optimizer": {"params": {"lr": 1e-3}, "type": "adamw"},
      "bf16": {"enabled": true},   "train_batch_size": 4})";
  const TrainingConfig ca = MustParse(a).config, cb = MustParse(b).config;
  EXPECT_EQ(CanonicalJson(ca), CanonicalJson(cb));
  EXPECT_EQ(ConfigFingerprint(ca), ConfigFingerprint(cb));
  TrainingConfig cc = ca;
  cc.optimizer.lr = 0.002;
  EXPECT_NE(CanonicalJson(ca), CanonicalJson(cc));
  EXPECT_NE(ConfigFingerprint(ca), ConfigFingerprint(cc));
  cc = ca;
  cc.cluster.model.layers += 1;
  EXPECT_NE(ConfigFingerprint(ca), ConfigFingerprint(cc));
  cc = ca;
  cc.zero.stage = 2;
  EXPECT_NE(ConfigFingerprint(ca), ConfigFingerprint(cc));
}

TEST(ConfigTest, LoadReportsMissingFile) {
  absl::StatusOr<ParsedConfig> p = LoadTrainingConfig("/nonexistent/zeroshard.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("/nonexistent/zeroshard.json"), std::string::npos);
}

// --steps=20 against gpt-small's 30-step warmup: the warmup is shortened to a
// tenth of the run, with a warning naming the key and both numbers.
TEST(ConfigTest, ShortRunShortensWarmup) {
  absl::StatusOr<ParsedConfig> p = LoadTrainingConfig("examples/gpt-small.json", {.steps = 20});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.optimizer.total_steps, 20u);
  EXPECT_EQ(p->config.optimizer.warmup_steps, 2u);
  EXPECT_TRUE(std::any_of(p->warnings.begin(), p->warnings.end(), [](const std::string& w) {
    return w.find("warmup_num_steps") != std::string::npos &&
           w.find("(30)") != std::string::npos && w.find("the run's 20 steps") != std::string::npos &&
           w.find("shortened to 2 steps") != std::string::npos;
  })) << absl::StrJoin(p->warnings, "\n");
  // Every scheduler with a warmup; a one-step run keeps a one-step warmup.
  for (const char* type : {"WarmupCosineLR", "WarmupLR", "WarmupDecayLR"}) {
    ParsedConfig q = MustParse(absl::StrCat(
        R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": ")", type,
        R"(", "params": {"warmup_type": "linear"}}})"), {.steps = 1});
    EXPECT_EQ(q.config.optimizer.warmup_steps, 1u) << type;  // DeepSpeed's default 1000
    EXPECT_EQ(q.config.optimizer.total_steps, 1u) << type;
    ASSERT_FALSE(q.warnings.empty()) << type;
    EXPECT_NE(q.warnings[0].find("(1000)"), std::string::npos) << q.warnings[0];
  }
  // A warmup that fits is kept, without a warning.
  ParsedConfig fits = MustParse(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {
      "type": "WarmupDecayLR", "params": {"warmup_type": "linear", "warmup_num_steps": 20}}})",
                                {.steps = 20});
  EXPECT_EQ(fits.config.optimizer.warmup_steps, 20u);
  EXPECT_TRUE(fits.warnings.empty()) << fits.warnings.front();
}

// WarmupDecayLR: linear warmup to the optimizer's lr, then linear decay to 0
// at total_num_steps (DeepSpeed's scheduler documentation).
TEST(ConfigTest, WarmupDecayLR) {
  ParsedConfig p = MustParse(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0,
        "warmup_max_lr": 0.002, "warmup_num_steps": 4, "warmup_type": "linear",
        "total_num_steps": 12, "last_batch_iteration": -1}},
      "zeroshard": {"steps": 100}})");
  EXPECT_TRUE(p.warnings.size() == 1 &&
              p.warnings[0].find("scheduler.params.last_batch_iteration") != std::string::npos)
      << absl::StrJoin(p.warnings, "\n");
  const OptimizerConfig& o = p.config.optimizer;
  EXPECT_EQ(o.schedule, LrScheduleKind::kWarmupLinear);
  EXPECT_EQ(o.lr, 0.002);
  EXPECT_EQ(o.warmup_steps, 4u);
  EXPECT_EQ(o.total_steps, 12u);
  EXPECT_EQ(o.min_lr, 0);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 1), 0.0005);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 4), 0.002);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 5), 0.002 * 7 / 8);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 8), 0.001);
  EXPECT_EQ(LearningRateAt(o, 12), 0);
  EXPECT_EQ(LearningRateAt(o, 50), 0);
  // "auto" total is the run's steps; the canonical form names the schedule.
  ParsedConfig a = MustParse(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto",
        "total_num_steps": "auto"}}})", {.steps = 30});
  EXPECT_EQ(a.config.optimizer.warmup_steps, 0u);  // "auto": Hugging Face's default
  EXPECT_EQ(a.config.optimizer.total_steps, 30u);
  EXPECT_NE(CanonicalJson(a.config).find("warmup_linear"), std::string::npos);
}

// The seed document's config: all three batch values "auto" resolve to a
// printed default; the keys without effect here are named in one warning.
TEST(ConfigTest, AutoBatchTakesThePrintedDefault) {
  absl::StatusOr<ParsedConfig> p = LoadTrainingConfig("examples/deepspeed/seed-zero2-offload.json");
  ASSERT_TRUE(p.ok()) << p.status();
  const TrainingConfig& c = p->config;
  EXPECT_EQ(c.micro_batch_size, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.precision, Precision::kFp16);
  ASSERT_EQ(p->warnings.size(), 2u) << absl::StrJoin(p->warnings, "\n");
  EXPECT_NE(p->warnings[0].find("train_micro_batch_size_per_gpu = 8"), std::string::npos)
      << p->warnings[0];
  EXPECT_NE(p->warnings[0].find("train_batch_size = 8"), std::string::npos) << p->warnings[0];
  for (const char* k : {"zero_optimization.offload_optimizer", "zero_optimization.allgather_partitions",
                        "zero_optimization.allgather_bucket_size", "zero_optimization.overlap_comm",
                        "zero_optimization.reduce_scatter"}) {
    EXPECT_NE(p->warnings[1].find(absl::StrCat("\"", k, "\"")), std::string::npos)
        << k << " not in " << p->warnings[1];
  }
  // With more workers the default micro batch holds and the total grows; a
  // given accumulation is kept.
  ParsedConfig w = MustParse(R"({"train_batch_size": "auto", "gradient_accumulation_steps": 2,
      "train_micro_batch_size_per_gpu": "auto"})", {.workers = 3});
  EXPECT_EQ(w.config.micro_batch_size, 8);
  EXPECT_EQ(w.config.gradient_accumulation_steps, 2);
  EXPECT_EQ(w.config.train_batch_size, 48);
  // Contradictions stay errors naming the keys.
  ExpectError(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4,
      "gradient_accumulation_steps": 1})",
              {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"});
  ExpectError(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})",
              {"train_batch_size", "gradient_accumulation_steps"});
}

// "auto" on every key of the seed document's config that takes one.
TEST(ConfigTest, SeedConfigKeysTakeAuto) {
  ParsedConfig p = MustParse(R"({
    "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": "auto"},
      "offload_param": {"device": "cpu", "pin_memory": "auto"},
      "allgather_partitions": "auto", "allgather_bucket_size": "auto",
      "overlap_comm": "auto", "reduce_scatter": "auto", "contiguous_gradients": "auto",
      "reduce_bucket_size": "auto"},
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})");
  EXPECT_EQ(p.config.zero.stage, 2);
  EXPECT_EQ(p.config.precision, Precision::kFp32);  // "auto" precision reads as off
  EXPECT_EQ(p.config.micro_batch_size, 8);
  ASSERT_EQ(p.warnings.size(), 2u) << absl::StrJoin(p.warnings, "\n");
  EXPECT_NE(p.warnings[1].find("\"zero_optimization.reduce_scatter\""), std::string::npos);
  EXPECT_EQ(p.warnings[1].find("unknown"), std::string::npos) << p.warnings[1];
}

// examples/deepspeed/: each file loads and maps onto zeroshard's settings.
TEST(ConfigTest, DeepSpeedExamplesMap) {
  auto load = [](const char* f) {
    absl::StatusOr<ParsedConfig> p = LoadTrainingConfig(absl::StrCat("examples/deepspeed/", f));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : ParsedConfig{};
  };
  const ParsedConfig z3 = load("zero3-offload-bf16.json");
  EXPECT_EQ(z3.config.zero.stage, 3);
  EXPECT_EQ(z3.config.precision, Precision::kBf16);
  EXPECT_EQ(z3.config.gradient_clipping, 1.0);
  EXPECT_EQ(z3.config.gradient_accumulation_steps, 4);
  EXPECT_EQ(z3.config.optimizer.lr, 3e-4);
  EXPECT_EQ(z3.config.optimizer.weight_decay, 0.1);
  EXPECT_EQ(z3.config.optimizer.schedule, LrScheduleKind::kWarmupCosine);  // WarmupLR
  EXPECT_EQ(z3.config.optimizer.min_lr, z3.config.optimizer.lr);
  ASSERT_EQ(z3.warnings.size(), 1u) << absl::StrJoin(z3.warnings, "\n");
  for (const char* k : {"offload_param", "sub_group_size", "wall_clock_breakdown"}) {
    EXPECT_NE(z3.warnings[0].find(k), std::string::npos) << k;
  }
  // The PyTorch front-end's ZeRO-3 reads these; only zeroshard-train warns.
  EXPECT_EQ(z3.warnings[0].find("stage3_max_live_parameters"), std::string::npos);
  EXPECT_EQ(absl::StrJoin(z3.front_end_only, ","),
            "\"zero_optimization.stage3_prefetch_bucket_size\","
            "\"zero_optimization.stage3_param_persistence_threshold\","
            "\"zero_optimization.stage3_max_live_parameters\","
            "\"zero_optimization.stage3_max_reuse_distance\"");

  const ParsedConfig z2 = load("zero2-fp16-warmupdecay.json");
  EXPECT_EQ(z2.config.zero.stage, 2);
  EXPECT_EQ(z2.config.precision, Precision::kFp16);
  EXPECT_EQ(z2.config.fp16.loss_scale, 0);
  EXPECT_EQ(z2.config.optimizer.kind, OptimizerKind::kAdamW);  // Adam, adam_w_mode default
  EXPECT_EQ(z2.config.optimizer.schedule, LrScheduleKind::kWarmupLinear);
  EXPECT_EQ(z2.config.optimizer.warmup_steps, 50u);
  EXPECT_EQ(z2.config.optimizer.total_steps, z2.config.cluster.steps);
  EXPECT_EQ(z2.config.gradient_accumulation_steps, 4);

  const ParsedConfig z1 = load("zero1-warmupcosine.json");
  EXPECT_EQ(z1.config.zero.stage, 1);
  EXPECT_EQ(z1.config.micro_batch_size, 8);  // 16 / (2 * 1 worker)
  EXPECT_EQ(z1.config.gradient_clipping, 0.5);
  EXPECT_DOUBLE_EQ(z1.config.optimizer.min_lr, 6e-5);

  // DeepSpeed's documented WarmupLR example has no warmup_type: DeepSpeed's
  // default, log, from warmup_min_lr 0 (its 1000 steps shortened to a tenth
  // of the default 100-step run).
  const ParsedConfig doc = load("warmuplr-docs-log.json");
  const OptimizerConfig& d = doc.config.optimizer;
  EXPECT_EQ(d.schedule, LrScheduleKind::kWarmupCosine);  // WarmupLR: constant after
  EXPECT_EQ(d.warmup_type, WarmupType::kLog);
  EXPECT_EQ(d.warmup_start_lr, 0);
  EXPECT_EQ(d.warmup_steps, 10u);
  EXPECT_EQ(d.lr, 0.001);
  EXPECT_DOUBLE_EQ(LearningRateAt(d, 1), 0.001 * std::log(2.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(LearningRateAt(d, 9), 0.001);
  EXPECT_EQ(LearningRateAt(d, 50), 0.001);
  EXPECT_NE(CanonicalJson(doc.config).find(R"("warmup_type":"log")"), std::string::npos);
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(doc.warnings, "\n"), "warmup shortened to 10"))
      << absl::StrJoin(doc.warnings, "\n");

  const ParsedConfig hf = load("hf-trainer-auto.json");
  EXPECT_EQ(hf.config.precision, Precision::kFp32);
  EXPECT_EQ(hf.config.micro_batch_size, 8);
  EXPECT_EQ(hf.config.optimizer.schedule, LrScheduleKind::kWarmupLinear);
  EXPECT_EQ(hf.config.optimizer.warmup_steps, 0u);
  EXPECT_EQ(hf.config.gradient_clipping, 0);
}

}  // namespace
}  // namespace zeroshard
