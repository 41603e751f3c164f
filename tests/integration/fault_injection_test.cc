// Crash recovery under random faults, with real processes (docs/DESIGN.md,
// "Crash recovery"): zeroshard-train --max_restarts runs a 2 x 2 cluster
// while the test kills (SIGKILL) a random server or worker at a random
// point of the run — mid-step, mid-push, mid-checkpoint-write, wherever it
// falls — chosen by the run's own progress (a random step, a random part of
// it), never by a clock, until ten trials (ZS_FAULT_KILLS) have killed a
// live process. Every trial must finish, and finish with the weights of the
// uninterrupted run, bit for bit. The seed is printed; ZS_FAULT_SEED repeats
// a sequence.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

namespace fs = std::filesystem;

// Trials go on until Kills() of them killed a live process, at most four
// more trials (with kill points chosen by the run's progress every trial
// should; the cap only bounds a broken test). ZS_FAULT_KILLS sets the count
// (1 to 100), for a longer hunt or a quicker run under a sanitizer, where
// each trial trains the whole run again at the sanitizer's pace.
int Kills() {
  if (const char* s = std::getenv("ZS_FAULT_KILLS")) {
    const int n = std::atoi(s);
    if (n >= 1 && n <= 100) return n;
  }
  return 10;
}
constexpr size_t kFaultSteps = 24;  // Config()'s steps
const absl::Duration kFaultRunTimeout = absl::Seconds(240);

nlohmann::json Config(const std::string& ckpt) {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = kFaultSteps;
  cfg["zeroshard"]["checkpoint"] = {
      {"dir", ckpt}, {"every_steps", 4}, {"keep_last", 2}};
  // A killed peer shows as a broken connection at once; the step timeout
  // only bounds a hang.
  cfg["zeroshard"]["timeouts"] = {{"step_seconds", 30},
                                  {"startup_seconds", 30}};
  return cfg;
}

// The pids of cluster.json, "server 0" ... "worker rank 1" -> pid; empty
// until the launcher wrote it.
std::vector<std::pair<std::string, int>> ClusterPids(const std::string& out) {
  std::ifstream in(out + "/cluster.json");
  std::vector<std::pair<std::string, int>> pids;
  if (!in) return pids;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return pids;
  for (const auto& s : j["servers"]) {
    if (s.contains("pid")) {
      pids.push_back({absl::StrCat("server ", s["index"].get<int>()),
                      s["pid"].get<int>()});
    }
  }
  for (const auto& w : j["workers"]) {
    pids.push_back({absl::StrCat("worker rank ", w["rank"].get<int>()),
                    w["pid"].get<int>()});
  }
  return pids;
}

TEST(FaultInjectionTest, RandomKillsLeaveTheFinalWeightsUnchanged) {
  TrainDir dir("faults");
  const std::string ref_cfg =
      dir.WriteConfig("ref.json", Config(dir.path("ref-ckpt")));
  TrainRun ref = RunTrain({"--config=" + ref_cfg, "--out=" + dir.path("ref"),
                           "--save_weights", "--quiet"},
                          kFaultRunTimeout);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  const auto want = ReadWeights(dir.path("ref"));
  EXPECT_EQ(NotTrained(dir.path("ref"), Config("")), "");

  uint64_t seed = std::random_device()();
  if (const char* s = std::getenv("ZS_FAULT_SEED")) seed = std::stoull(s);
  std::printf("ZS_FAULT_SEED=%llu (reference run %.1f s)\n",
              static_cast<unsigned long long>(seed), ref.seconds);
  std::mt19937_64 rng(seed);
  const int kills = Kills();
  int killed = 0;
  int t = 0;
  for (; t < kills + 4 && killed < kills; ++t) {
    const std::string out = dir.path(absl::StrCat("t", t));
    const std::string cfg = dir.WriteConfig(
        absl::StrCat("t", t, ".json"), Config(dir.path(absl::StrCat("t", t, "-ckpt"))));
    SubprocessOptions o;
    o.argv = {BinDir() + "/zeroshard-train", "--config=" + cfg, "--out=" + out,
              "--save_weights", "--quiet", "--max_restarts=3"};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path = dir.path(absl::StrCat("t", t, ".err"));
    absl::StatusOr<std::unique_ptr<Subprocess>> train = Subprocess::Start(o);
    ASSERT_TRUE(train.ok()) << train.status();
    // Wait for the processes, then kill one at a point chosen by the run's
    // own progress: once step k is done (k = 0: during start-up, Init and
    // the rendezvous), a random fraction of this run's own step time into
    // step k. k <= kFaultSteps - 2 leaves a step after it, so every process of
    // cluster.json is still alive then, however slow the machine.
    std::vector<std::pair<std::string, int>> pids;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while ((pids = ClusterPids(out)).size() < 4 && absl::Now() < deadline &&
           !(*train)->Poll().has_value()) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(pids.size(), 4u) << "trial " << t << ": no cluster.json";
    const size_t k = std::uniform_int_distribution<size_t>(0, kFaultSteps - 2)(rng);
    const double frac = std::uniform_real_distribution<double>(0, 1)(rng);
    const auto& victim = pids[rng() % pids.size()];
    const StepReached reached = WaitForStep(out, k, **train, kFaultRunTimeout);
    ASSERT_TRUE(reached.ok) << "trial " << t << ": step " << k
                            << " not reached (" << StepsDone(out) << " done)\n"
                            << ReadFile(o.stderr_path);
    // Step 0's time holds the start-up: from step 2 on, the last step
    // measures this run's pace.
    const absl::Duration into = k <= 1 ? frac * absl::Milliseconds(200)
                                       : frac * reached.last_step;
    absl::SleepFor(into);
    const size_t landed = StepsDone(out);
    const bool hit = kill(victim.second, SIGKILL) == 0;
    killed += hit;
    const std::string at = absl::StrCat(
        "step ", landed, " (aimed: ", k, " steps done + ",
        static_cast<int>(100 * frac), "% of a step)");
    std::printf("trial %d: SIGKILL %s (pid %d) in %s%s\n", t,
                victim.first.c_str(), victim.second, at.c_str(),
                hit ? "" : " (already gone)");
    absl::StatusOr<ExitStatus> st = (*train)->Wait(kFaultRunTimeout);
    ASSERT_TRUE(st.ok()) << "trial " << t << " did not end within "
                         << absl::FormatDuration(kFaultRunTimeout);
    std::ifstream err_in(o.stderr_path);
    const std::string err((std::istreambuf_iterator<char>(err_in)),
                          std::istreambuf_iterator<char>());
    ASSERT_TRUE(st->success()) << "trial " << t << ": " << st->ToString()
                               << "\n" << err;
    if (hit && absl::StartsWith(victim.first, "server")) {
      // A server's death restarts every process: the first attempt's logs
      // are kept beside the new ones, and the restart line says where.
      for (const char* log : {"/logs/server0.log.0", "/logs/server1.log.0",
                              "/logs/worker0.log.0", "/logs/worker1.log.0"}) {
        EXPECT_TRUE(std::filesystem::exists(out + log))
            << "trial " << t << ": " << log << " was not kept\n" << err;
      }
      EXPECT_NE(err.find("attempt 0's logs are kept as "), std::string::npos)
          << err;
    }
    WeightDiff d = CompareWeights(ReadWeights(out), want);
    EXPECT_TRUE(d.bit_identical) << "trial " << t << " (" << victim.first
                                 << " in " << at << "): max_abs "
                                 << d.max_abs << " in " << d.worst_tensor;
  }
  std::printf("%d of %d trials killed a live process; all survived\n", killed,
              t);
  EXPECT_EQ(killed, kills);
}

// The narrowest window: every worker prepared step 5 everywhere and rank 0
// died after ApplyStep reached server 0 only. The launcher finishes the
// step from server 1's prepared pushes; nothing is redone, nothing lost.
TEST(FaultInjectionTest, RankZeroDyingHalfWayThroughApplyLosesNoStep) {
  TrainDir dir("partial");
  nlohmann::json cfg = Config(dir.path("ckpt"));
  cfg["zeroshard"]["steps"] = 12;
  const std::string path = dir.WriteConfig("c.json", cfg);
  TrainRun ref = RunTrain({"--config=" + path, "--out=" + dir.path("ref"),
                           "--save_weights", "--quiet"},
                          kFaultRunTimeout);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  TrainRun run = RunTrain({"--config=" + path, "--out=" + dir.path("run"),
                           "--save_weights", "--quiet", "--max_restarts=1",
                           "--inject_partial_apply_at_step=5"},
                          kFaultRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.err;
  EXPECT_NE(run.err.find("step 5 finished from the servers' prepared pushes"),
            std::string::npos)
      << run.err;
  WeightDiff d = CompareWeights(ReadWeights(dir.path("run")),
                                ReadWeights(dir.path("ref")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
  EXPECT_EQ(NotTrained(dir.path("ref"), cfg), "");
  // Steps 6.. ran once, on the new workers, from version 6.
  auto rows = ReadMetricsCsv(dir.path("run") + "/metrics.csv");
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back().at("step"), "11");
}

}  // namespace
}  // namespace zeroshard::testing
