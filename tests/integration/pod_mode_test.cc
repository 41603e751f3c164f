// Pod mode with real processes on 127.0.0.1 (docs/DESIGN.md, "Pod mode"):
// servers and workers started by hand, as Kubernetes starts them, every
// worker with --attempt=auto --role=auto, no --servers (the config's
// zeroshard.servers list) and no --hostname. A killed process is started
// again with the same flags, as the kubelet restarts a container:
//   - worker 1 killed mid-run (worker 0 then fails on its collective and is
//     restarted too): training continues from the servers' step, and the
//     final state is bit for bit that of an uninterrupted run;
//   - server 1 killed and restarted (fresh) mid-run: the workers fail with
//     an error naming the restarted server, and once restarted restore
//     every server from the newest checkpoint and finish;
//   - rank 0 killed half way through applying a step: the next attempt
//     finishes the step from the servers' prepared pushes.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/shard_channels.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "common/resolved_config.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"

namespace zeroshard::testing {
namespace {

constexpr int kServers = 2;
constexpr int kWorkers = 2;

// Shard servers on fixed ports once started, so that one can be killed and
// started again at its address, as a StatefulSet pod is.
class Servers {
 public:
  // Files go to <dir>/<name>-server<k>-<n>.{port,log}.
  Servers(const TrainDir& dir, std::string name)
      : dir_(dir), name_(std::move(name)) {}
  ~Servers() {
    for (auto& s : procs_) {
      if (s != nullptr) s->Stop(absl::Seconds(5));
    }
  }

  absl::Status Start() {
    for (int k = 0; k < kServers; ++k) {
      procs_.emplace_back();
      ports_.push_back(0);
      if (absl::Status s = StartOne(k); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status StartOne(int k) {
    const std::string port_file =
        dir_.path(absl::StrCat(name_, "-server", k, "-", ++starts_, ".port"));
    SubprocessOptions o;
    o.argv = {BinDir() + "/zeroshard-server",
              absl::StrCat("--listen=127.0.0.1:", ports_[k]),
              absl::StrCat("--server_index=", k),
              absl::StrCat("--num_servers=", kServers),
              "--port_file=" + port_file, "--no_auth"};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path =
        dir_.path(absl::StrCat(name_, "-server", k, "-", starts_, ".log"));
    o.env = {{"ZEROSHARD_OPTIMIZER_THREADS", "1"}};
    auto p = Subprocess::Start(o);
    if (!p.ok()) return p.status();
    procs_[k] = std::move(*p);
    auto port = WaitForPortFile(port_file, absl::Seconds(30), procs_[k].get());
    if (!port.ok()) return port.status();
    ports_[k] = *port;
    return absl::OkStatus();
  }
  void Kill(int k) {
    procs_[k]->Signal(SIGKILL).IgnoreError();
    procs_[k]->Wait(absl::Seconds(10)).IgnoreError();
  }
  std::vector<std::string> addresses() const {
    std::vector<std::string> a;
    for (int p : ports_) a.push_back(absl::StrCat("127.0.0.1:", p));
    return a;
  }

 private:
  const TrainDir& dir_;
  const std::string name_;
  int starts_ = 0;
  std::vector<std::unique_ptr<Subprocess>> procs_;
  std::vector<int> ports_;
};

// The resolved config of a 2-server, 2-worker run whose zeroshard.servers
// lists the servers' addresses (the workers get no --servers).
std::string WriteResolvedConfig(const TrainDir& dir, const std::string& name,
                                const std::vector<std::string>& servers,
                                int steps) {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["servers"] = servers;
  cfg["zeroshard"]["workers"] = kWorkers;
  cfg["zeroshard"]["steps"] = steps;
  cfg["zeroshard"]["timeouts"]["step_seconds"] = 10;
  cfg["zeroshard"]["timeouts"]["startup_seconds"] = 20;
  cfg["zeroshard"]["checkpoint"] = {{"dir", dir.path(name + "-ckpt")},
                                    {"every_steps", 4}};
  cfg["zeroshard"].erase("metrics");
  cfg["zeroshard"].erase("plot");
  auto parsed = LoadTrainingConfig(dir.WriteConfig(name + ".json", cfg), {});
  if (!parsed.ok()) return "";
  const std::string path = dir.path(name + ".resolved.json");
  if (!WriteFileAtomically(path, ResolvedConfigJson(parsed->config)).ok()) {
    return "";
  }
  return path;
}

// One worker process per rank, restartable with the same flags.
class Workers {
 public:
  // Files go to <dir>/<name>-worker<r>-<n>.{out,log}.
  Workers(const TrainDir& dir, std::string name, std::string config,
          std::string ckpt, std::vector<std::string> extra_flags = {})
      : dir_(dir),
        name_(std::move(name)),
        config_(std::move(config)),
        ckpt_(std::move(ckpt)),
        extra_flags_(std::move(extra_flags)) {
    procs_.resize(kWorkers);
  }
  ~Workers() {
    for (auto& w : procs_) {
      if (w != nullptr) w->Stop(absl::Seconds(5));
    }
  }
  // Starts (or starts again) rank r; its stdout and stderr go to
  // worker<r>-<n>.out / .log.
  absl::Status Start(int r) {
    const int n = ++starts_;
    SubprocessOptions o;
    o.argv = {BinDir() + "/zeroshard-worker", absl::StrCat("--rank=", r),
              absl::StrCat("--world_size=", kWorkers), "--config=" + config_,
              "--run_id=pods", "--attempt=auto", "--role=auto",
              "--resume=" + ckpt_, "--threads=1"};
    o.argv.insert(o.argv.end(), extra_flags_.begin(), extra_flags_.end());
    o.stdout_mode = SubprocessOptions::Output::kFile;
    o.stdout_path =
        dir_.path(absl::StrCat(name_, "-worker", r, "-", n, ".out"));
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path =
        dir_.path(absl::StrCat(name_, "-worker", r, "-", n, ".log"));
    out_[r] = o.stdout_path;
    auto p = Subprocess::Start(o);
    if (!p.ok()) return p.status();
    procs_[r] = std::move(*p);
    return absl::OkStatus();
  }
  Subprocess& proc(int r) { return *procs_[r]; }
  // Rank 0's progress lines of its latest start.
  std::vector<nlohmann::json> Events() const {
    std::vector<nlohmann::json> events;
    auto it = out_.find(0);
    if (it == out_.end()) return events;
    for (absl::string_view line :
         absl::StrSplit(ReadFile(it->second), '\n', absl::SkipEmpty())) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) events.push_back(j);
    }
    return events;
  }
  // Waits (bounded) until rank 0 has printed `steps` step lines.
  bool WaitForSteps(size_t steps, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      size_t n = 0;
      for (const auto& e : Events()) n += e.value("event", "") == "step";
      if (n >= steps) return true;
      if (procs_[0]->Poll().has_value()) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  std::string Logs() const {
    std::string all;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(name_ + "-worker", 0) == 0 &&
          entry.path().extension() == ".log") {
        all += "== " + name + "\n" + ReadFile(entry.path().string());
      }
    }
    return all;
  }

 private:
  const TrainDir& dir_;
  const std::string name_;
  const std::string config_;
  const std::string ckpt_;
  const std::vector<std::string> extra_flags_;
  int starts_ = 0;
  std::vector<std::unique_ptr<Subprocess>> procs_;
  std::map<int, std::string> out_;
};

// Both ranks finish (exit 0) within `timeout`.
void ExpectBothFinish(Workers& w, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < kWorkers; ++r) {
    auto st = w.proc(r).Wait(std::max(deadline - absl::Now(),
                                      absl::Seconds(1)));
    ASSERT_TRUE(st.ok()) << "rank " << r << " hung: " << st.status() << "\n"
                         << w.Logs();
    ASSERT_TRUE(st->success()) << "rank " << r << "\n" << w.Logs();
  }
}

// The servers' final state, as Inspect sums it up: equal norms of the
// master weights and both moments mean equal state (bit for bit in
// practice).
struct Summary {
  uint64_t version = 0;
  uint64_t adam_step = 0;
  std::vector<double> norms;
};
Summary Summarize(const std::vector<std::string>& servers) {
  Summary s;
  auto channels = ShardChannels::Connect(servers, ShardClientOptions());
  EXPECT_TRUE(channels.ok()) << channels.status();
  if (!channels.ok()) return s;
  for (const auto& r : (*channels)->InspectAll()) {
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) continue;
    s.version = r->max_version();
    s.adam_step = r->adam_step();
    s.norms.push_back(r->norms().master());
    s.norms.push_back(r->norms().exp_avg());
    s.norms.push_back(r->norms().exp_avg_sq());
  }
  return s;
}

constexpr int kPodSteps = 24;

// A pod-mode run without faults: the reference state.
Summary Uninterrupted(const TrainDir& dir) {
  Servers servers(dir, "ref");
  EXPECT_TRUE(servers.Start().ok());
  const std::string config =
      WriteResolvedConfig(dir, "ref", servers.addresses(), kPodSteps);
  EXPECT_FALSE(config.empty());
  Workers w(dir, "ref", config, dir.path("ref-ckpt"));
  for (int r = 0; r < kWorkers; ++r) EXPECT_TRUE(w.Start(r).ok());
  ExpectBothFinish(w, absl::Seconds(60));
  return Summarize(servers.addresses());
}

TEST(PodModeTest, RestartedWorkerRejoinsTheSameStep) {
  TrainDir dir("pods_worker");
  const Summary reference = Uninterrupted(dir);
  ASSERT_EQ(reference.version, kPodSteps);
  ASSERT_EQ(reference.norms.size(), 3u * kServers);

  Servers servers(dir, "run");
  ASSERT_TRUE(servers.Start().ok());
  const std::string config =
      WriteResolvedConfig(dir, "run", servers.addresses(), kPodSteps);
  ASSERT_FALSE(config.empty());
  Workers w(dir, "run", config, dir.path("run-ckpt"));
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  ASSERT_TRUE(w.WaitForSteps(6, absl::Seconds(40))) << w.Logs();

  // Worker 1's pod dies; the kubelet starts it again with the same flags.
  w.proc(1).Signal(SIGKILL).IgnoreError();
  ASSERT_TRUE(w.proc(1).Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(w.Start(1).ok());
  // Worker 0 fails on its next collective (bounded by the step timeout),
  // and is restarted alike.
  auto st0 = w.proc(0).Wait(absl::Seconds(30));
  ASSERT_TRUE(st0.ok()) << "rank 0 did not notice its peer died\n" << w.Logs();
  EXPECT_FALSE(st0->success());
  ASSERT_TRUE(w.Start(0).ok());
  ExpectBothFinish(w, absl::Seconds(60));

  const std::vector<nlohmann::json> events = w.Events();
  ASSERT_FALSE(events.empty()) << w.Logs();
  EXPECT_EQ(events.front().value("event", ""), "start");
  EXPECT_GE(events.front().value("step", 0), 6) << "did not continue";
  EXPECT_EQ(events.back().value("event", ""), "done");
  EXPECT_EQ(events.back().value("step", 0), kPodSteps);
  const std::string logs = w.Logs();
  EXPECT_TRUE(absl::StrContains(logs, "this rank restarted")) << logs;
  const Summary got = Summarize(servers.addresses());
  EXPECT_EQ(got.version, reference.version);
  EXPECT_EQ(got.adam_step, reference.adam_step);
  EXPECT_EQ(got.norms, reference.norms) << "not bit-exact";
}

TEST(PodModeTest, RestartedServerIsRestoredFromTheNewestCheckpoint) {
  TrainDir dir("pods_server");
  Servers servers(dir, "run");
  ASSERT_TRUE(servers.Start().ok());
  const std::string config =
      WriteResolvedConfig(dir, "run", servers.addresses(), kPodSteps);
  ASSERT_FALSE(config.empty());
  Workers w(dir, "run", config, dir.path("run-ckpt"));
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  // Past the checkpoint of step 4 (written by the start of step 8).
  ASSERT_TRUE(w.WaitForSteps(10, absl::Seconds(40))) << w.Logs();

  servers.Kill(1);
  // The replacement listens only after the client's own retries (about
  // 1 s) are spent, as a pod restarted by the kubelet does: the workers
  // still wait for it and name it as restarted, not merely unreachable.
  absl::SleepFor(absl::Seconds(2));
  ASSERT_TRUE(servers.StartOne(1).ok());
  // Both workers fail, with an error, within bounded time; the kubelet
  // restarts them with the same flags.
  for (int r = 0; r < kWorkers; ++r) {
    auto st = w.proc(r).Wait(absl::Seconds(40));
    ASSERT_TRUE(st.ok()) << "rank " << r << " hung after the server restart\n"
                         << w.Logs();
    EXPECT_FALSE(st->success()) << "rank " << r;
  }
  EXPECT_TRUE(absl::StrContains(w.Logs(), "server 1 (" + servers.addresses()[1] +
                                     ") restarted during step"))
      << w.Logs();
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  ExpectBothFinish(w, absl::Seconds(60));

  const std::vector<nlohmann::json> events = w.Events();
  ASSERT_FALSE(events.empty()) << w.Logs();
  EXPECT_EQ(events.front().value("event", ""), "start");
  const int start = events.front().value("step", -1);
  EXPECT_GE(start, 4) << w.Logs();
  EXPECT_EQ(start % 4, 0) << "not a checkpoint's step";
  EXPECT_EQ(events.back().value("event", ""), "done");
  EXPECT_EQ(events.back().value("step", 0), kPodSteps);
  EXPECT_TRUE(absl::StrContains(w.Logs(), "restoring every server")) << w.Logs();
  EXPECT_EQ(Summarize(servers.addresses()).version, kPodSteps);
}

// The same restart with no checkpoint to restore from (--resume empty):
// the restarted workers say which server lost its state and what to do,
// instead of "the previous run did not finish its step", and exit.
TEST(PodModeTest, RestartedServerWithNoCheckpointIsNamed) {
  TrainDir dir("pods_lost");
  Servers servers(dir, "run");
  ASSERT_TRUE(servers.Start().ok());
  const std::string config =
      WriteResolvedConfig(dir, "run", servers.addresses(), kPodSteps);
  ASSERT_FALSE(config.empty());
  Workers w(dir, "run", config, "");
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  ASSERT_TRUE(w.WaitForSteps(4, absl::Seconds(40))) << w.Logs();
  servers.Kill(1);
  ASSERT_TRUE(servers.StartOne(1).ok());
  for (int r = 0; r < kWorkers; ++r) {
    auto st = w.proc(r).Wait(absl::Seconds(40));
    ASSERT_TRUE(st.ok()) << "rank " << r << " hung\n" << w.Logs();
  }
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  for (int r = 0; r < kWorkers; ++r) {
    auto st = w.proc(r).Wait(absl::Seconds(60));
    ASSERT_TRUE(st.ok()) << "rank " << r << " hung\n" << w.Logs();
    EXPECT_FALSE(st->success()) << "rank " << r;
  }
  const std::string logs = w.Logs();
  EXPECT_TRUE(absl::StrContains(logs, "server " + servers.addresses()[1] +
                                 " is fresh at step 0 while the run stands"))
      << logs;
  EXPECT_TRUE(absl::StrContains(logs, "it was restarted and lost its state")) << logs;
}

// Rank 0 dies having applied step 5 on server 0 only (the two-phase
// commit's second phase cut short); worker 1 fails with it. Restarted with
// the same flags, rank 0 finishes step 5 from the prepared pushes (there is
// no launcher to do it) and the run goes on from step 6.
TEST(PodModeTest, HalfAppliedStepIsFinishedByTheNextAttempt) {
  TrainDir dir("pods_apply");
  Servers servers(dir, "run");
  ASSERT_TRUE(servers.Start().ok());
  const std::string config =
      WriteResolvedConfig(dir, "run", servers.addresses(), kPodSteps);
  ASSERT_FALSE(config.empty());
  Workers w(dir, "run", config, dir.path("run-ckpt"),
            {"--inject_partial_apply_at_step=5"});
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  for (int r = 0; r < kWorkers; ++r) {
    auto st = w.proc(r).Wait(absl::Seconds(40));
    ASSERT_TRUE(st.ok()) << "rank " << r << " hung\n" << w.Logs();
    EXPECT_FALSE(st->success()) << "rank " << r;
  }
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(w.Start(r).ok());
  ExpectBothFinish(w, absl::Seconds(60));
  const std::vector<nlohmann::json> events = w.Events();
  ASSERT_FALSE(events.empty()) << w.Logs();
  EXPECT_EQ(events.front().value("step", -1), 6) << w.Logs();
  EXPECT_EQ(events.back().value("event", ""), "done");
  EXPECT_TRUE(absl::StrContains(w.Logs(), "finishing it from the prepared pushes"))
      << w.Logs();
  EXPECT_EQ(Summarize(servers.addresses()).version, kPodSteps);
}

}  // namespace
}  // namespace zeroshard::testing
