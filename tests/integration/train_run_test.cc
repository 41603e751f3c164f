// Whole training runs through the real zeroshard-train (servers and workers
// as processes on 127.0.0.1): the loss falls, and runs that must train the
// same function give the same final FP32 weights (out/weights.f32).
//
// Tolerances. Changing the worker count or the micro-batch split changes the
// order of the FP32 gradient sums, so the gradients differ by rounding
// (~1e-7 relative). Adam divides by sqrt(v): on elements whose gradient is
// itself rounding noise (e.g. the attention key bias, whose true gradient is
// 0) that noise becomes an O(lr) step, so an element-wise relative bound is
// meaningless. The checks are therefore
//   - the weight updates agree: ||a - b|| / ||b - init|| < 1e-3 (measured
//     ~1e-5 .. 1e-4), and
//   - no element differs by more than 5% of the largest Adam movement,
//     lr * steps.
// ZeRO stages 1, 2, 3 with the same worker count and
// gradient_accumulation_steps 1 run the same reduce-scatter of the same
// per-unit gradients, so they must be bit-identical.
// FP32 precision throughout the parity runs (bf16 rounding of the fetched
// weights would dominate the differences).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

constexpr double kUpdateTolerance = 1e-3;
// Largest element difference, as a fraction of lr * steps.
constexpr double kElementFraction = 0.05;

void ExpectSameTraining(const std::map<std::string, std::vector<float>>& a,
                        const std::map<std::string, std::vector<float>>& b,
                        const nlohmann::json& cfg) {
  const double lr = cfg["optimizer"]["params"]["lr"].get<double>();
  const double steps = cfg["zeroshard"]["steps"].get<double>();
  const double rel = RelativeUpdateDiff(a, b, InitialWeights(cfg));
  WeightDiff d = CompareWeights(a, b);
  EXPECT_LT(rel, kUpdateTolerance);
  EXPECT_LT(d.max_abs, kElementFraction * lr * steps)
      << "worst tensor " << d.worst_tensor;
  // Training moved the weights well beyond these differences, and no further
  // than Adam can (|step| <~ lr), which also checks that InitialWeights is
  // the servers' init.
  const double moved = CompareWeights(b, InitialWeights(cfg)).max_abs;
  EXPECT_GT(moved, 0.5 * lr);
  EXPECT_LT(moved, 1.5 * lr * steps);
  std::printf("update diff %.3g, max element diff %.3g (%.3g of lr*steps)\n",
              rel, d.max_abs, d.max_abs / (lr * steps));
}
const absl::Duration kRunTimeout = absl::Seconds(240);

double MeanLoss(const std::vector<std::map<std::string, std::string>>& rows,
                size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += std::stod(rows[i].at("loss"));
  return sum / static_cast<double>(end - begin);
}

// Runs `config` with --save_weights into dir/<name>; returns the weights.
std::map<std::string, std::vector<float>> TrainAndRead(
    const TrainDir& dir, const std::string& name, const nlohmann::json& cfg) {
  const std::string config = dir.WriteConfig(name + ".json", cfg);
  const std::string out = dir.path(name);
  TrainRun run = RunTrain(
      {"--config=" + config, "--out=" + out, "--save_weights", "--quiet"},
      kRunTimeout);
  EXPECT_TRUE(run.status.success())
      << name << ": " << run.status.ToString() << "\n" << run.err;
  auto w = ReadWeights(out);
  EXPECT_FALSE(w.empty()) << name << ": no weights in " << out;
  return w;
}

TEST(TrainRunTest, LossFallsAndOutputsAreWritten) {
  TrainDir dir("loss");
  nlohmann::json cfg = SmallConfig();
  cfg["bf16"] = {{"enabled", true}};
  cfg["optimizer"]["params"]["lr"] = 3e-3;
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = 30;
  const std::string config = dir.WriteConfig("loss.json", cfg);
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + config, "--out=" + out}, kRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;

  auto rows = ReadMetricsCsv(out + "/metrics.csv");
  ASSERT_EQ(rows.size(), 30u);
  for (const char* col : {"step", "loss", "tokens_per_s", "loss_scale",
                          "grad_norm", "lr", "skipped", "seconds"}) {
    EXPECT_EQ(rows[0].count(col), 1u) << col;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(std::stoul(rows[i].at("step")), i);
    EXPECT_TRUE(std::isfinite(std::stod(rows[i].at("loss"))));
    EXPECT_EQ(rows[i].at("skipped"), "false");
  }
  const double first5 = MeanLoss(rows, 0, 5);
  const double last5 = MeanLoss(rows, rows.size() - 5, rows.size());
  // Byte-level start is ln(256) ~ 5.55; 30 steps at lr 3e-3 learn the byte
  // frequencies at least.
  EXPECT_GT(std::stod(rows[0].at("loss")), 5.0);
  EXPECT_LT(last5, first5 - 0.5) << "first5 " << first5 << " last5 " << last5;

  const std::string svg = [&] {
    std::ifstream in(out + "/loss.svg");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  EXPECT_NE(svg.find("<path"), std::string::npos);
  EXPECT_NE(run.err.find("summary"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("metrics"), std::string::npos);
  for (const char* log : {"server0.log", "server1.log", "worker0.log",
                          "worker1.log"}) {
    EXPECT_TRUE(std::ifstream(out + "/logs/" + log).good()) << log;
  }
}

TEST(TrainRunTest, TwoServersTwoWorkersMatchOneByOne) {
  TrainDir dir("parity");
  nlohmann::json one = SmallConfig();
  nlohmann::json two = SmallConfig();
  two["zeroshard"]["servers"] = 2;
  two["zeroshard"]["workers"] = 2;
  auto a = TrainAndRead(dir, "one", one);
  auto b = TrainAndRead(dir, "two", two);
  ExpectSameTraining(b, a, one);
}

TEST(TrainRunTest, ZeroStagesOneTwoThreeGiveTheSameWeights) {
  TrainDir dir("stages");
  std::map<std::string, std::vector<float>> w[3];
  for (int stage = 1; stage <= 3; ++stage) {
    nlohmann::json cfg = SmallConfig();
    cfg["zeroshard"]["workers"] = 2;
    cfg["zero_optimization"]["stage"] = stage;
    w[stage - 1] = TrainAndRead(dir, absl::StrCat("stage", stage), cfg);
  }
  nlohmann::json stage3 = SmallConfig();
  stage3["zeroshard"]["workers"] = 2;
  EXPECT_EQ(NotTrained(dir.path("stage3"), stage3), "");
  for (int s : {0, 1}) {
    WeightDiff d = CompareWeights(w[s], w[2]);
    EXPECT_TRUE(d.bit_identical)
        << "stage " << s + 1 << " vs 3: max_abs " << d.max_abs << " in "
        << d.worst_tensor;
  }
}

TEST(TrainRunTest, FourMicroBatchesMatchOneBatch) {
  TrainDir dir("accum");
  nlohmann::json whole = SmallConfig();
  whole["train_micro_batch_size_per_gpu"] = 8;
  whole["gradient_accumulation_steps"] = 1;
  nlohmann::json quarters = SmallConfig();
  quarters["train_micro_batch_size_per_gpu"] = 2;
  quarters["gradient_accumulation_steps"] = 4;
  auto a = TrainAndRead(dir, "whole", whole);
  auto b = TrainAndRead(dir, "quarters", quarters);
  ExpectSameTraining(b, a, whole);
}

TEST(TrainRunTest, TrainsOnGivenServerAddresses) {
  // "The same binaries run as separate processes on separate hosts when
  // given addresses": servers started elsewhere (here: by the test), the
  // launcher starts only workers.
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  TrainDir dir("remote");
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["workers"] = 2;
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + out, "--quiet",
                           "--server_addresses=" + (*cluster)->server_list()},
                          kRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
  EXPECT_EQ(ReadMetricsCsv(out + "/metrics.csv").size(), 3u);
  EXPECT_FALSE(std::ifstream(out + "/logs/server0.log").good());
  // The servers kept the trained state: a second run continues from step 3.
  TrainRun more = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                            "--out=" + dir.path("more"), "--quiet",
                            "--steps=5",
                            "--server_addresses=" + (*cluster)->server_list()},
                           kRunTimeout);
  ASSERT_TRUE(more.status.success()) << more.err;
  auto rows = ReadMetricsCsv(dir.path("more") + "/metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("step"), "3");
  // Server 1 restarted (empty) on its address: a third run names it and
  // says what to do, before starting any worker.
  ASSERT_TRUE((*cluster)->Restart(1).ok());
  TrainRun after = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                             "--out=" + dir.path("after"), "--quiet",
                             "--steps=7",
                             "--server_addresses=" + (*cluster)->server_list()},
                            kRunTimeout);
  EXPECT_FALSE(after.status.success());
  EXPECT_NE(after.err.find(absl::StrCat("server 1 (",
                                        (*cluster)->addresses()[1],
                                        ") is not initialised, while server 0")),
            std::string::npos)
      << after.err;
  EXPECT_NE(after.err.find("at step 5: it was restarted and lost the run's "
                           "state"),
            std::string::npos)
      << after.err;
  EXPECT_NE(after.err.find("--resume=DIR"), std::string::npos) << after.err;
  EXPECT_EQ(after.err.find("did not finish its step"), std::string::npos)
      << after.err;
}

}  // namespace
}  // namespace zeroshard::testing
