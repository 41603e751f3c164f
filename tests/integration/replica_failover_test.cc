// Replicas under random faults, with real processes (docs/DESIGN.md,
// "Replicas"): zeroshard-train runs 3 servers x 2 workers with
// zeroshard.replicas 2 and --max_restarts=0 while the test kills (SIGKILL)
// a random server at a random point of the run, chosen by the run's own
// progress (a random step, then a random part of its step time). Every
// trial must finish without a restart, every step once, with the weights
// of an uninterrupted one-copy run, bit for bit. The seed is printed;
// ZS_REPLICA_SEED repeats a sequence, ZS_REPLICA_KILLS sets the trials.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client_options.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

// Trials that must kill a live server (ZS_REPLICA_KILLS, 1 to 100).
int ReplicaKills() {
  if (const char* s = std::getenv("ZS_REPLICA_KILLS")) {
    const int n = std::atoi(s);
    if (n >= 1 && n <= 100) return n;
  }
  return 3;
}
constexpr size_t kReplicaSteps = 40;
const absl::Duration kReplicaRunTimeout = absl::Seconds(240);

nlohmann::json ReplicaConfig(int replicas, const std::string& ckpt) {
  nlohmann::json cfg = SmallConfig();
  cfg["bf16"] = {{"enabled", true}};
  cfg["zeroshard"]["servers"] = 3;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["replicas"] = replicas;
  // The copies compared while steps compute (client/copy_audit.h), also
  // across the kills: steps 4, 12, 20, ... (8, 16, ... are checkpoints').
  cfg["zeroshard"]["replica_check_every_steps"] = 4;
  cfg["zeroshard"]["steps"] = kReplicaSteps;
  cfg["zeroshard"]["checkpoint"] = {
      {"dir", ckpt}, {"every_steps", 8}, {"keep_last", 2}};
  cfg["zeroshard"]["timeouts"] = {{"step_seconds", 30},
                                  {"startup_seconds", 30}};
  return cfg;
}

// The servers' pids from cluster.json; empty until the launcher wrote it.
std::vector<int> ServerPids(const std::string& out) {
  std::ifstream in(out + "/cluster.json");
  std::vector<int> pids;
  if (!in) return pids;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return pids;
  for (const auto& s : j["servers"]) {
    if (s.contains("pid")) pids.push_back(s["pid"].get<int>());
  }
  return pids;
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// zeroshard-train in the background on `config` into `out` with
// `max_restarts`, its stderr to `err`.
absl::StatusOr<std::unique_ptr<Subprocess>> StartTrain(
    const std::string& config, const std::string& out, int max_restarts,
    const std::string& err) {
  SubprocessOptions o;
  o.argv = {BinDir() + "/zeroshard-train", "--config=" + config,
            "--out=" + out, "--save_weights", "--quiet",
            absl::StrCat("--max_restarts=", max_restarts)};
  o.stdout_mode = SubprocessOptions::Output::kDiscard;
  o.stderr_mode = SubprocessOptions::Output::kFile;
  o.stderr_path = err;
  return Subprocess::Start(o);
}

// `cfg` run with one copy into dir/ref (its checkpoints in dir/ref-ck), to
// be compared bit for bit with the same run with two.
TrainRun RunOneCopy(TrainDir& dir, nlohmann::json cfg) {
  cfg["zeroshard"]["replicas"] = 1;
  cfg["zeroshard"]["checkpoint"]["dir"] = dir.path("ref-ck");
  return RunTrain({"--config=" + dir.WriteConfig("ref.json", cfg),
                   "--out=" + dir.path("ref"), "--save_weights", "--quiet"},
                  kReplicaRunTimeout);
}

// The longest step and the median step of a run's metrics (seconds).
std::pair<double, double> LongestAndMedianStep(const std::string& out) {
  std::vector<double> s;
  for (const auto& row : ReadMetricsCsv(out + "/metrics.csv")) {
    s.push_back(std::stod(row.at("seconds")));
  }
  if (s.empty()) return {0, 0};
  std::sort(s.begin(), s.end());
  return {s.back(), s[s.size() / 2]};
}

TEST(ReplicaFailoverTest, AKilledServerCostsNoStepAndNoBit) {
  TrainDir dir("replicas");
  // The reference keeps one copy: a second copy must change no bit.
  const std::string ref_cfg =
      dir.WriteConfig("ref.json", ReplicaConfig(1, dir.path("ref-ckpt")));
  TrainRun ref = RunTrain({"--config=" + ref_cfg, "--out=" + dir.path("ref"),
                           "--save_weights", "--quiet"},
                          kReplicaRunTimeout);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  const auto want = ReadWeights(dir.path("ref"));

  uint64_t seed = std::random_device()();
  if (const char* s = std::getenv("ZS_REPLICA_SEED")) seed = std::stoull(s);
  std::printf("ZS_REPLICA_SEED=%llu (reference run %.1f s)\n",
              static_cast<unsigned long long>(seed), ref.seconds);
  std::mt19937_64 rng(seed);
  const int kills = ReplicaKills();
  int killed = 0, revived = 0, t = 0;
  for (; t < kills + 4 && killed < kills; ++t) {
    const std::string name = absl::StrCat("t", t);
    const std::string out = dir.path(name);
    const std::string cfg = dir.WriteConfig(
        name + ".json", ReplicaConfig(2, dir.path(name + "-ckpt")));
    const std::string err_path = dir.path(name + ".err");
    const absl::Time started = absl::Now();
    absl::StatusOr<std::unique_ptr<Subprocess>> train =
        StartTrain(cfg, out, 0, err_path);
    ASSERT_TRUE(train.ok()) << train.status();
    std::vector<int> pids;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while ((pids = ServerPids(out)).size() < 3 && absl::Now() < deadline &&
           !(*train)->Poll().has_value()) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(pids.size(), 3u) << "trial " << t << ": no cluster.json";
    // Once step k is done (k >= 1: start-up needs every server), a random
    // fraction of this run's own step time into step k + 1; k <= kReplicaSteps - 2
    // leaves a step after it.
    const size_t k = std::uniform_int_distribution<size_t>(1, kReplicaSteps - 2)(rng);
    const double frac = std::uniform_real_distribution<double>(0, 1)(rng);
    const size_t victim = rng() % pids.size();
    const StepReached reached = WaitForStep(out, k, **train, kReplicaRunTimeout);
    ASSERT_TRUE(reached.ok) << "trial " << t << ": step " << k
                            << " not reached\n" << ReadWhole(err_path);
    absl::SleepFor(frac * reached.last_step);
    const size_t landed = StepsDone(out);
    const bool hit = kill(pids[victim], SIGKILL) == 0;
    killed += hit;
    absl::StatusOr<ExitStatus> st = (*train)->Wait(kReplicaRunTimeout);
    ASSERT_TRUE(st.ok()) << "trial " << t << " did not end";
    const std::string err = ReadWhole(err_path);
    ASSERT_TRUE(st->success()) << "trial " << t << ": server " << victim
                               << " killed at step " << landed << ": "
                               << st->ToString() << "\n" << err;
    const auto [longest, median] = LongestAndMedianStep(out);
    const bool restored = ReadWhole(out + "/logs/worker0.log")
                              .find("took its copies back") != std::string::npos;
    revived += restored;
    std::printf(
        "trial %d: SIGKILL server %zu in step %zu (aimed: %zu done + %d%%)%s; "
        "longest step %.2f s, median %.3f s; the run took %.1f s; the "
        "replacement %s\n",
        t, victim, landed, k, static_cast<int>(100 * frac),
        hit ? "" : " (already gone)", longest, median,
        absl::ToDoubleSeconds(absl::Now() - started),
        restored ? "took its copies back" : "was not restored before the end");
    if (hit) {
      EXPECT_NE(err.find("its slots go on from their other copies"),
                std::string::npos)
          << err;
    }
    // No restart: every step ran once, on the first workers.
    EXPECT_EQ(err.find("restart 1:"), std::string::npos) << err;
    EXPECT_EQ(StepsDone(out), kReplicaSteps);
    WeightDiff d = CompareWeights(ReadWeights(out), want);
    EXPECT_TRUE(d.bit_identical) << "trial " << t << " (server " << victim
                                 << " in step " << landed << "): max_abs "
                                 << d.max_abs << " in " << d.worst_tensor;
  }
  std::printf("%d of %d trials killed a live server; none restarted; %d "
              "replacements took their copies back before the run ended\n",
              killed, t, revived);
  EXPECT_EQ(killed, kills);
}

// The launcher starts a replacement at the dead server's address and rank 0
// restores its two copies from a checkpoint of the step it finds it at: the
// run has both copies of every slot again. Proof: a second server, next to
// the first (servers 1 and 2 both hold slot 1), is killed after that and the
// run still ends with no restart, bit for bit.
TEST(ReplicaFailoverTest, AReplacementTakesItsCopiesBackAndTheNextDeathCostsNothing) {
  TrainDir dir("revive");
  nlohmann::json cfg = ReplicaConfig(2, dir.path("ck"));
  cfg["zeroshard"]["steps"] = 200;
  const std::string path = dir.WriteConfig("c.json", cfg);
  const TrainRun ref = RunOneCopy(dir, cfg);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  const std::string out = dir.path("run");
  const std::string err_path = dir.path("run.err");
  absl::StatusOr<std::unique_ptr<Subprocess>> train =
      StartTrain(path, out, 0, err_path);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(WaitForStep(out, 5, **train, kReplicaRunTimeout).ok)
      << ReadWhole(err_path);
  std::vector<int> pids = ServerPids(out);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  // Rank 0 says when the replacement holds its copies (its log).
  const std::string rank0 = out + "/logs/worker0.log";
  const absl::Time deadline = absl::Now() + kReplicaRunTimeout;
  while (ReadWhole(rank0).find("took its copies back") == std::string::npos &&
         absl::Now() < deadline && !(*train)->Poll().has_value()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::string log = ReadWhole(rank0);
  ASSERT_NE(log.find("server 1 (") , std::string::npos) << log;
  ASSERT_NE(log.find("took its copies back"), std::string::npos)
      << "the run ended before the replacement was restored\n" << log
      << ReadWhole(err_path);
  const size_t revived_at = StepsDone(out);
  pids = ServerPids(out);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(kill(pids[2], SIGKILL), 0);
  absl::StatusOr<ExitStatus> st = (*train)->Wait(kReplicaRunTimeout);
  ASSERT_TRUE(st.ok());
  const std::string err = ReadWhole(err_path);
  ASSERT_TRUE(st->success()) << st->ToString() << "\n" << err;
  std::printf("server 1 killed after step 5, its replacement restored by "
              "step %zu, then server 2 killed\n", revived_at);
  EXPECT_EQ(err.find("restart 1:"), std::string::npos) << err;
  EXPECT_EQ(StepsDone(out), 200u);
  WeightDiff d = CompareWeights(ReadWeights(out), ReadWeights(dir.path("ref")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
  // Each rank reaches the replacement through shared memory again (its
  // region went with the server it left).
  for (const char* rank : {"/logs/worker0.log", "/logs/worker1.log"}) {
    const std::string w = ReadWhole(out + rank);
    EXPECT_NE(w.find("server 1 back: 3 of 3 servers through shared memory "
                     "again"),
              std::string::npos)
        << rank << "\n" << w;
  }
}

// Both copies of a slot lost (servers 1 and 2 hold slot 1): the run goes
// back to today's path, a restart from the newest checkpoint, which fills
// both copies again, and still ends bit for bit.
TEST(ReplicaFailoverTest, BothCopiesLostRestartFromTheCheckpoint) {
  TrainDir dir("both");
  const std::string cfg = dir.WriteConfig("c.json", ReplicaConfig(2, dir.path("ck")));
  TrainRun ref = RunTrain({"--config=" + cfg, "--out=" + dir.path("ref"),
                           "--save_weights", "--quiet"},
                          kReplicaRunTimeout);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  const std::string out = dir.path("run");
  const std::string err_path = dir.path("run.err");
  absl::StatusOr<std::unique_ptr<Subprocess>> train =
      StartTrain(cfg, out, 1, err_path);
  ASSERT_TRUE(train.ok()) << train.status();
  // Past the first checkpoint (step 8), so the restart restores one.
  const StepReached reached = WaitForStep(out, 12, **train, kReplicaRunTimeout);
  ASSERT_TRUE(reached.ok) << ReadWhole(err_path);
  const std::vector<int> pids = ServerPids(out);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  ASSERT_EQ(kill(pids[2], SIGKILL), 0);
  absl::StatusOr<ExitStatus> st = (*train)->Wait(kReplicaRunTimeout);
  ASSERT_TRUE(st.ok());
  const std::string err = ReadWhole(err_path);
  ASSERT_TRUE(st->success()) << st->ToString() << "\n" << err;
  EXPECT_NE(err.find("all processes restarted from the newest checkpoint"),
            std::string::npos)
      << err;
  WeightDiff d = CompareWeights(ReadWeights(out), ReadWeights(dir.path("ref")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
}

// FP16 keeps its loss scaler's state in the servers' key-value store: rank
// 0 writes the next step's record before it applies each step, for a
// successor to find (worker/engine/resume.h). With replicas that store is
// on servers 0 and 1, so server 0 lost costs no step either. It hangs here
// (SIGSTOP: its connections stay open, nothing answers), so no replacement
// at its address can answer for it: the records go on from server 1 within
// the failover's seconds, not a call's deadline, and the run ends bit for
// bit as the one-copy run does.
TEST(ReplicaFailoverTest, AnFp16RunLosesServerZeroAndItsKeyValueStoreGoesOn) {
  TrainDir dir("fp16kv");
  nlohmann::json cfg = ReplicaConfig(2, dir.path("ck"));
  cfg.erase("bf16");
  cfg["fp16"] = {{"enabled", true}, {"initial_scale_power", 12},
                 {"loss_scale_window", 4}, {"hysteresis", 1},
                 {"min_loss_scale", 1}};
  cfg["zeroshard"]["steps"] = 16;
  cfg["zeroshard"]["timeouts"]["step_seconds"] = 10;
  const TrainRun ref = RunOneCopy(dir, cfg);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  const std::string out = dir.path("run");
  const std::string err_path = dir.path("run.err");
  absl::StatusOr<std::unique_ptr<Subprocess>> train =
      StartTrain(dir.WriteConfig("c.json", cfg), out, 0, err_path);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(WaitForStep(out, 5, **train, kReplicaRunTimeout).ok)
      << ReadWhole(err_path);
  const std::vector<int> pids = ServerPids(out);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
  const StepReached past = WaitForStep(out, 9, **train, kReplicaRunTimeout);
  kill(pids[0], SIGCONT);
  ASSERT_TRUE(past.ok) << "no step after server 0 hung\n"
                       << ReadWhole(err_path)
                       << ReadWhole(out + "/logs/worker0.log");
  absl::StatusOr<ExitStatus> st = (*train)->Wait(kReplicaRunTimeout);
  ASSERT_TRUE(st.ok());
  const std::string err = ReadWhole(err_path);
  ASSERT_TRUE(st->success()) << st->ToString() << "\n" << err;
  EXPECT_EQ(err.find("restart 1:"), std::string::npos) << err;
  EXPECT_EQ(StepsDone(out), 16u);
  const auto [longest, median] = LongestAndMedianStep(out);
  std::printf("server 0 hung after step 5: longest step %.2f s, median "
              "%.3f s\n", longest, median);
  EXPECT_LT(longest, absl::ToDoubleSeconds(kLagBeforeProbe + kWatchEvery +
                                           kDefaultSilenceProbe) + 1.5);
  WeightDiff d = CompareWeights(ReadWeights(out), ReadWeights(dir.path("ref")));
  EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                               << d.worst_tensor;
}

// Trials of a hung server (ZS_REPLICA_HANGS, 1 to 100; 1 by default).
int ReplicaHangs() {
  if (const char* s = std::getenv("ZS_REPLICA_HANGS")) {
    const int n = std::atoi(s);
    if (n >= 1 && n <= 100) return n;
  }
  return 1;
}

// A server that hangs (SIGSTOP: its connections stay open, nothing
// answers) is not a dead process the launcher sees: each worker's client
// finds a call to it waiting over a second, a brief probe goes unanswered,
// and the run goes on with the other copies within seconds, well inside
// the step timeout. Woken (SIGCONT) three steps later, it answers again,
// and rank 0 makes its copies the checkpoint's. A random server at a random
// point of a random step (as the kills above are chosen); no restart, bit
// for bit. ZS_REPLICA_SEED repeats a sequence.
TEST(ReplicaFailoverTest, AHungServerIsLeftAndTakesItsCopiesBackWhenItAnswers) {
  TrainDir dir("hung");
  nlohmann::json cfg = ReplicaConfig(2, dir.path("ck"));
  cfg["zeroshard"]["timeouts"]["step_seconds"] = 10;
  const TrainRun ref = RunOneCopy(dir, cfg);
  ASSERT_TRUE(ref.status.success()) << ref.err;
  const auto want = ReadWeights(dir.path("ref"));
  uint64_t seed = std::random_device()();
  if (const char* s = std::getenv("ZS_REPLICA_SEED")) seed = std::stoull(s);
  std::printf("ZS_REPLICA_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int t = 0; t < ReplicaHangs(); ++t) {
    const std::string name = absl::StrCat("h", t);
    const std::string out = dir.path(name);
    const std::string err_path = dir.path(name + ".err");
    cfg["zeroshard"]["checkpoint"]["dir"] = dir.path(name + "-ck");
    absl::StatusOr<std::unique_ptr<Subprocess>> train =
        StartTrain(dir.WriteConfig(name + ".json", cfg), out, 0, err_path);
    ASSERT_TRUE(train.ok()) << train.status();
    // After step k (k >= 1), a random part of its step time into k + 1;
    // k <= kReplicaSteps - 6 leaves room for the three steps and a revival.
    const size_t k =
        std::uniform_int_distribution<size_t>(1, kReplicaSteps - 6)(rng);
    const double frac = std::uniform_real_distribution<double>(0, 1)(rng);
    const StepReached reached = WaitForStep(out, k, **train, kReplicaRunTimeout);
    ASSERT_TRUE(reached.ok) << "trial " << t << ": step " << k
                            << " not reached\n" << ReadWhole(err_path);
    const std::vector<int> pids = ServerPids(out);
    ASSERT_EQ(pids.size(), 3u);
    const size_t victim = rng() % pids.size();
    absl::SleepFor(frac * reached.last_step);
    ASSERT_EQ(kill(pids[victim], SIGSTOP), 0);
    const size_t stopped_at = StepsDone(out);
    const StepReached past = WaitForStep(out, stopped_at + 3, **train,
                                         kReplicaRunTimeout);
    kill(pids[victim], SIGCONT);
    ASSERT_TRUE(past.ok) << "trial " << t << ": no step after server "
                         << victim << " hung\n" << ReadWhole(err_path)
                         << ReadWhole(out + "/logs/worker0.log")
                         << ReadWhole(out + "/logs/worker1.log");
    absl::StatusOr<ExitStatus> st = (*train)->Wait(kReplicaRunTimeout);
    ASSERT_TRUE(st.ok());
    const std::string err = ReadWhole(err_path);
    ASSERT_TRUE(st->success()) << "trial " << t << ": " << st->ToString()
                               << "\n" << err;
    const std::string log = ReadWhole(out + "/logs/worker0.log");
    EXPECT_NE(log.find(absl::StrCat("server ", victim, " (")), std::string::npos)
        << log;
    EXPECT_NE(log.find("is gone; its slots are served by their other copy"),
              std::string::npos)
        << log;
    const bool back = log.find("took its copies back") != std::string::npos;
    const auto [longest, median] = LongestAndMedianStep(out);
    std::printf("trial %d: server %zu hung in step %zu (aimed: %zu done + "
                "%d%%); longest step %.2f s (median %.3f s); %s\n",
                t, victim, stopped_at, k, static_cast<int>(100 * frac),
                longest, median,
                back ? "woken, it took its copies back"
                     : "woken, it was not restored before the end");
    // The step that met the hung server waited a second, a tick of the
    // watch and the probe (client/client_options.h), not its calls'
    // deadline (10 s).
    EXPECT_LT(longest, absl::ToDoubleSeconds(kLagBeforeProbe + kWatchEvery +
                                             kDefaultSilenceProbe) + 1.5);
    EXPECT_EQ(err.find("restart 1:"), std::string::npos) << err;
    EXPECT_EQ(StepsDone(out), kReplicaSteps);
    WeightDiff d = CompareWeights(ReadWeights(out), want);
    EXPECT_TRUE(d.bit_identical) << "trial " << t << " (server " << victim
                                 << " in step " << stopped_at << "): max_abs "
                                 << d.max_abs << " in " << d.worst_tensor;
  }
}

}  // namespace
}  // namespace zeroshard::testing
