// zeroshard-train under faults and bad input, with real processes: every
// case ends with a clear error naming the key or the process, within a
// bounded time, and leaves no process behind.
//   - an injected FP16 overflow skips that step and halves the loss scale;
//   - a config value of the wrong type, an invalid model shape;
//   - two workers started on different configs (FAILED_PRECONDITION);
//   - a server killed mid-run, a worker that hangs (SIGSTOP), Ctrl-C.
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "common/resolved_config.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

TEST(TrainFaultTest, InjectedFp16OverflowSkipsTheStepAndHalvesTheScale) {
  TrainDir dir("overflow");
  nlohmann::json cfg = SmallConfig();
  cfg["fp16"] = {{"enabled", true}, {"initial_scale_power", 8},
                 {"loss_scale_window", 1000}, {"hysteresis", 1},
                 {"min_loss_scale", 1}};
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = 5;
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("fp16.json", cfg),
                           "--out=" + out, "--inject_overflow_at_step=2"},
                          absl::Seconds(180));
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
  auto rows = ReadMetricsCsv(out + "/metrics.csv");
  ASSERT_EQ(rows.size(), 5u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("skipped"), i == 2 ? "true" : "false") << "step " << i;
  }
  // The overflow's gradient norm is inf, as the scaler saw it.
  EXPECT_EQ(rows[2].at("grad_norm"), "inf");
  EXPECT_NE(rows[1].at("grad_norm"), "inf");
  const double before = std::stod(rows[2].at("loss_scale"));
  EXPECT_DOUBLE_EQ(before, 256);  // 2^initial_scale_power, no earlier overflow
  EXPECT_DOUBLE_EQ(std::stod(rows[1].at("loss_scale")), before);
  EXPECT_DOUBLE_EQ(std::stod(rows[3].at("loss_scale")), before / 2);
  EXPECT_DOUBLE_EQ(std::stod(rows[4].at("loss_scale")), before / 2);
  EXPECT_TRUE(absl::StrContains(run.err, "1 skipped")) << run.err;
}

TEST(TrainFaultTest, WrongTypeInConfigNamesTheKey) {
  TrainDir dir("badtype");
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["steps"] = "many";
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + dir.path("out")},
                          absl::Seconds(60));
  EXPECT_TRUE(run.status.exited);
  EXPECT_NE(run.status.code, 0);
  EXPECT_TRUE(absl::StrContains(run.err, "zeroshard.steps")) << run.err;
}

TEST(TrainFaultTest, InvalidModelShapeIsAClearError) {
  TrainDir dir("badshape");
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["model"]["width"] = 100;
  cfg["zeroshard"]["model"]["heads"] = 3;
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + dir.path("out")},
                          absl::Seconds(60));
  EXPECT_TRUE(run.status.exited);
  EXPECT_NE(run.status.code, 0);
  EXPECT_TRUE(absl::StrContains(run.err, "heads")) << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "summary"));
}

TEST(TrainFaultTest, WorkersThatDisagreeOnTheConfigFail) {
  TrainDir dir("disagree");
  nlohmann::json a = SmallConfig();
  nlohmann::json b = SmallConfig();
  b["optimizer"]["params"]["lr"] = 2e-3;
  a["zeroshard"]["timeouts"]["step_seconds"] = 20;
  b["zeroshard"]["timeouts"]["step_seconds"] = 20;
  // Each worker gets its own resolved configuration, as a deployment that
  // resolved two different files would give them.
  std::string configs[2];
  for (int r = 0; r < 2; ++r) {
    auto parsed = LoadTrainingConfig(
        dir.WriteConfig(r == 0 ? "a.json" : "b.json", r == 0 ? a : b),
        {.servers = 1, .workers = 2});
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    configs[r] = dir.path(absl::StrCat("resolved", r, ".json"));
    ASSERT_TRUE(
        WriteFileAtomically(configs[r], ResolvedConfigJson(parsed->config))
            .ok());
  }
  auto cluster = LocalCluster::Start(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<Subprocess> workers[2];
  for (int r = 0; r < 2; ++r) {
    SubprocessOptions o;
    o.argv = {BinDir() + "/zeroshard-worker", absl::StrCat("--rank=", r),
              "--world_size=2", "--servers=" + (*cluster)->server_list(),
              "--config=" + configs[r], "--run_id=disagree"};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path = dir.path(absl::StrCat("worker", r, ".log"));
    auto p = Subprocess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    workers[r] = std::move(*p);
  }
  std::string logs;
  for (int r = 0; r < 2; ++r) {
    auto st = workers[r]->Wait(absl::Seconds(90));
    ASSERT_TRUE(st.ok()) << "worker " << r << " hung: " << st.status();
    EXPECT_FALSE(st->success()) << "worker " << r;
    logs += ReadFile(dir.path(absl::StrCat("worker", r, ".log")));
  }
  EXPECT_TRUE(absl::StrContains(logs, "FAILED_PRECONDITION")) << logs;
  EXPECT_TRUE(absl::StrContains(logs, "config")) << logs;
}

// A zeroshard-train run in the background, for killing things under it.
class BackgroundTrain {
 public:
  BackgroundTrain(const TrainDir& dir, nlohmann::json cfg) : dir_(dir) {
    SubprocessOptions o;
    o.argv = {BinDir() + "/zeroshard-train",
              "--config=" + dir.WriteConfig("bg.json", cfg),
              "--out=" + dir.path("out")};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path = dir.path("train.err");
    auto p = Subprocess::Start(o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) process_ = std::move(*p);
  }

  // Waits (bounded) until the metrics file has `steps` rows.
  bool WaitForSteps(size_t steps, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (ReadMetricsCsv(dir_.path("out/metrics.csv")).size() >= steps) {
        return true;
      }
      if (process_ == nullptr || process_->Poll().has_value()) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // The pid of a child from out/cluster.json ("servers" / "workers").
  int ChildPid(const std::string& group, int index) const {
    auto j = nlohmann::json::parse(ReadFile(dir_.path("out/cluster.json")),
                                   nullptr, false);
    if (j.is_discarded()) return -1;
    return j[group][index]["pid"].get<int>();
  }
  std::vector<int> AllChildPids() const {
    std::vector<int> pids;
    auto j = nlohmann::json::parse(ReadFile(dir_.path("out/cluster.json")),
                                   nullptr, false);
    if (j.is_discarded()) return pids;
    for (const char* g : {"servers", "workers"}) {
      for (const auto& c : j[g]) pids.push_back(c["pid"].get<int>());
    }
    return pids;
  }

  Subprocess* process() { return process_.get(); }
  std::string err() const { return ReadFile(dir_.path("train.err")); }

 private:
  const TrainDir& dir_;
  std::unique_ptr<Subprocess> process_;
};

bool Alive(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

nlohmann::json LongRunConfig() {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = 100000;  // never finishes on its own
  cfg["zeroshard"]["timeouts"]["step_seconds"] = 15;
  return cfg;
}

TEST(TrainFaultTest, ServerKilledMidRunIsNamedAndNothingIsLeft) {
  TrainDir dir("killserver");
  BackgroundTrain train(dir, LongRunConfig());
  ASSERT_NE(train.process(), nullptr);
  ASSERT_TRUE(train.WaitForSteps(2, absl::Seconds(120))) << train.err();
  const std::vector<int> pids = train.AllChildPids();
  const int server1 = train.ChildPid("servers", 1);
  ASSERT_GT(server1, 0);
  ASSERT_EQ(kill(server1, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  auto st = train.process()->Wait(absl::Seconds(90));
  ASSERT_TRUE(st.ok()) << "zeroshard-train did not exit: " << train.err();
  // The death itself is seen (the launcher polls its children), not a
  // step timeout after it: the run ends within step_seconds (15 s).
  const absl::Duration took = absl::Now() - killed;
  EXPECT_LT(took, absl::Seconds(15)) << absl::FormatDuration(took);
  EXPECT_TRUE(st->exited);
  EXPECT_EQ(st->code, 1);
  const std::string err = train.err();
  EXPECT_TRUE(absl::StrContains(err, "server 1 (127.0.0.1:")) << err;
  EXPECT_TRUE(absl::StrContains(err, "signal 9")) << err;
  // The cause first: the killed server, then the workers that lost it.
  const size_t failed = err.find("zeroshard-train: FAILED: ");
  ASSERT_NE(failed, std::string::npos) << err;
  EXPECT_TRUE(absl::StrContains(
      err.substr(failed, err.find('\n', failed) - failed),
      "FAILED: UNAVAILABLE: server 1 (127.0.0.1:"))
      << err;
  for (int pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " left";
}

TEST(TrainFaultTest, HungWorkerIsReportedWithinTheStepTimeout) {
  TrainDir dir("hang");
  nlohmann::json cfg = LongRunConfig();
  cfg["zeroshard"]["timeouts"]["step_seconds"] = 4;
  BackgroundTrain train(dir, cfg);
  ASSERT_NE(train.process(), nullptr);
  ASSERT_TRUE(train.WaitForSteps(2, absl::Seconds(120))) << train.err();
  const std::vector<int> pids = train.AllChildPids();
  const int worker1 = train.ChildPid("workers", 1);
  ASSERT_EQ(kill(worker1, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  auto st = train.process()->Wait(absl::Seconds(90));
  ASSERT_TRUE(st.ok()) << "zeroshard-train did not exit: " << train.err();
  // Within the step timeout (4 s) the hang is noticed; 10 s more for
  // stopping every child on a loaded machine.
  const absl::Duration took = absl::Now() - stopped;
  EXPECT_LT(took, absl::Seconds(4 + 10)) << absl::FormatDuration(took);
  EXPECT_EQ(st->code, 1);
  const std::string err = train.err();
  // Either the launcher's own watchdog fires, or worker 0's collective
  // times out first and it exits naming its peer; both name a process.
  EXPECT_TRUE((absl::StrContains(err, "no progress for") &&
               absl::StrContains(err, "worker rank 1 is stopped")) ||
              absl::StrContains(err, "worker rank 0 exited"))
      << err;
  for (int pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " left";
}

TEST(TrainFaultTest, InterruptStopsEveryChild) {
  TrainDir dir("sigint");
  BackgroundTrain train(dir, LongRunConfig());
  ASSERT_NE(train.process(), nullptr);
  ASSERT_TRUE(train.WaitForSteps(1, absl::Seconds(120))) << train.err();
  const std::vector<int> pids = train.AllChildPids();
  ASSERT_EQ(pids.size(), 4u);
  ASSERT_TRUE(train.process()->Signal(SIGINT).ok());
  auto st = train.process()->Wait(absl::Seconds(60));
  ASSERT_TRUE(st.ok()) << "zeroshard-train did not exit: " << train.err();
  EXPECT_EQ(st->code, 130) << train.err();
  for (int pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " left";
}

}  // namespace
}  // namespace zeroshard::testing
