// Every DeepSpeed config under examples/deepspeed/ trains a few steps through
// the real zeroshard-train (servers and workers as processes on 127.0.0.1):
// the file as a user brings it, with only the model shrunk (zeroshard.model)
// and the run shortened (--steps=3, which also shortens each warmup, with
// a warning). Its warnings reach the launcher's log: the keys without effect
// here in one line, and the default chosen for an all-"auto" batch.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

constexpr int kSteps = 3;

nlohmann::json LoadExample(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                               /*ignore_comments=*/true);
}

std::vector<std::string> Examples() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("examples/deepspeed")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(DeepSpeedExamplesTest, EachTrainsAFewSteps) {
  const std::vector<std::string> files = Examples();
  ASSERT_GE(files.size(), 6u) << "expected examples/deepspeed/*.json";
  TrainDir dir("deepspeed");
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const std::string name = std::filesystem::path(file).stem().string();
    nlohmann::json cfg = LoadExample(file);
    // The user's file, with a tiny model and local outputs.
    nlohmann::json& z = cfg["zeroshard"];
    z["model"] = {{"layers", 1}, {"heads", 2}, {"width", 64}, {"vocab", 256}, {"context", 16}};
    z["metrics"] = {{"path", "metrics.csv"}, {"format", "csv"}};
    z["timeouts"] = {{"step_seconds", 60}, {"startup_seconds", 30}};
    const std::string config = dir.WriteConfig(name + ".json", cfg);
    const std::string out = dir.path(name);
    TrainRun run = RunTrain({"--config=" + config, "--out=" + out,
                             absl::StrCat("--steps=", kSteps), "--servers=1", "--workers=1"},
                            absl::Seconds(120));
    ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
    const auto rows = ReadMetricsCsv(out + "/metrics.csv");
    ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps)) << run.err;
    for (const auto& row : rows) EXPECT_TRUE(std::isfinite(std::stod(row.at("loss"))));
    // One warning names every key without effect here; none is unknown.
    EXPECT_EQ(Count(run.err, "no effect in zeroshard"), 1u) << run.err;
    EXPECT_EQ(run.err.find("unknown config keys"), std::string::npos) << run.err;
    if (name == "zero3-offload-bf16") {
      // The stage3_* keys the PyTorch front-end reads: named apart.
      const size_t at = run.err.find("zeroshard-train does not read");
      ASSERT_NE(at, std::string::npos) << run.err;
      EXPECT_NE(run.err.find("stage3_max_reuse_distance", at), std::string::npos) << run.err;
    }
    if (name == "seed-zero2-offload" || name == "hf-trainer-auto") {
      EXPECT_NE(run.err.find("train_micro_batch_size_per_gpu = 8"), std::string::npos) << run.err;
    }
    if (name == "zero2-fp16-warmupdecay") {
      // 50 warmup steps in a 3-step run: shortened to 1, then linear to 0.
      EXPECT_NE(run.err.find("warmup shortened to 1 step"), std::string::npos) << run.err;
      if (rows[1].at("skipped") == "false" && rows[0].at("skipped") == "false") {
        EXPECT_NEAR(std::stod(rows[0].at("lr")), 1e-3, 1e-9);
        EXPECT_NEAR(std::stod(rows[1].at("lr")), 5e-4, 1e-9);
      }
    }
    if (name == "warmuplr-docs-log") {
      // DeepSpeed's log warmup (no warmup_type), shortened to 1 step, which
      // DeepSpeed raises to 2: log(2) / log(2), the full lr from step 1.
      EXPECT_NE(run.err.find("warmup shortened to 1 step"), std::string::npos) << run.err;
      for (const auto& row : rows) EXPECT_NEAR(std::stod(row.at("lr")), 1e-3, 1e-12);
    }
  }
}

// WarmupDecayLR reaches the servers (WARMUP_LINEAR on the wire): its lr is 0
// at total_num_steps, so a 3-step run over a 3-step schedule ends with the
// weights a 2-step run of the same schedule reaches, bit for bit; a server
// that kept a constant lr, or refused the schedule, fails this.
TEST(DeepSpeedExamplesTest, WarmupDecayLRDecaysToZeroOnTheServers) {
  TrainDir dir("warmupdecay");
  nlohmann::json cfg = SmallConfig();
  cfg["scheduler"] = nlohmann::json::parse(R"({"type": "WarmupDecayLR", "params": {
      "warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 1,
      "warmup_type": "linear", "total_num_steps": 3}})");
  std::map<std::string, std::vector<float>> w[2];
  for (int steps : {2, 3}) {
    cfg["zeroshard"]["steps"] = steps;
    const std::string name = absl::StrCat("s", steps);
    const std::string config = dir.WriteConfig(name + ".json", cfg);
    TrainRun run = RunTrain({"--config=" + config, "--out=" + dir.path(name), "--save_weights",
                             "--quiet"},
                            absl::Seconds(120));
    ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
    w[steps - 2] = ReadWeights(dir.path(name));
    ASSERT_FALSE(w[steps - 2].empty());
  }
  EXPECT_EQ(NotTrained(dir.path("s2"), cfg), "");
  const WeightDiff d = CompareWeights(w[1], w[0]);
  EXPECT_TRUE(d.bit_identical) << "step 3 moved " << d.worst_tensor << " by " << d.max_abs;
}

// A log warmup reaches the servers (WARMUP_TYPE_LOG on the wire): over 2
// warmup steps it is log(2) / log(2) = 1 from step 1, so 2 steps of it end
// bit for bit where 2 steps at a constant lr do, while a linear 2-step warmup
// (lr / 2 at step 1) ends elsewhere. The workers' lr column says the same.
TEST(DeepSpeedExamplesTest, LogWarmupOnTheServers) {
  TrainDir dir("logwarmup");
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["steps"] = 2;  // SmallConfig's lr is 1e-3
  std::map<std::string, std::map<std::string, std::vector<float>>> w;
  std::map<std::string, std::vector<std::map<std::string, std::string>>> rows;
  for (const char* name : {"constant", "log", "linear"}) {
    cfg.erase("scheduler");
    if (std::string(name) != "constant") {
      cfg["scheduler"] = {{"type", "WarmupLR"},
                          {"params", {{"warmup_num_steps", 2}, {"warmup_max_lr", 1e-3}}}};
      if (std::string(name) == "linear") cfg["scheduler"]["params"]["warmup_type"] = "linear";
    }
    const std::string config = dir.WriteConfig(absl::StrCat(name, ".json"), cfg);
    TrainRun run = RunTrain({"--config=" + config, "--out=" + dir.path(name), "--save_weights",
                             "--quiet"},
                            absl::Seconds(120));
    ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
    w[name] = ReadWeights(dir.path(name));
    ASSERT_FALSE(w[name].empty());
    rows[name] = ReadMetricsCsv(dir.path(name) + "/metrics.csv");
    ASSERT_EQ(rows[name].size(), 2u) << name;
  }
  EXPECT_EQ(NotTrained(dir.path("log"), cfg), "");
  const WeightDiff same = CompareWeights(w["log"], w["constant"]);
  EXPECT_TRUE(same.bit_identical) << same.worst_tensor << " differs by " << same.max_abs;
  EXPECT_FALSE(CompareWeights(w["linear"], w["constant"]).bit_identical);
  EXPECT_NEAR(std::stod(rows["log"][0].at("lr")), 1e-3, 1e-12);
  EXPECT_NEAR(std::stod(rows["linear"][0].at("lr")), 5e-4, 1e-12);
}

}  // namespace
}  // namespace zeroshard::testing
