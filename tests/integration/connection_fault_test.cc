// Cut and stalled connections, with real processes: zeroshard-train trains
// on two servers reached through loopback TCP proxies (tests/support/
// tcp_proxy.h) that the test makes drop or stall their connections
// mid-run. Nothing may hang past its deadline: a stalled server ends the
// run with an error naming the wait within the step timeout (plus slack),
// and dropped connections either heal (gRPC reconnects; the step is
// retried or redone under --max_restarts, and the weights are the
// uninterrupted run's, bit for bit) or end the run with a clear error —
// never silently wrong weights.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"
#include "tests/support/tcp_proxy.h"

namespace zeroshard::testing {
namespace {

constexpr double kStepSeconds = 3;

nlohmann::json Config(uint64_t steps) {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = steps;
  cfg["zeroshard"]["timeouts"] = {{"step_seconds", kStepSeconds},
                                  {"startup_seconds", 10}};
  return cfg;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// zeroshard-train on `proxies`, in the background.
struct Background {
  std::unique_ptr<Subprocess> process;
  std::string err_path;
};
Background StartTrain(const TrainDir& dir, const std::string& name,
                      const nlohmann::json& cfg,
                      const std::vector<std::string>& addresses,
                      const std::vector<std::string>& extra) {
  Background b;
  b.err_path = dir.path(name + ".err");
  SubprocessOptions o;
  o.argv = {BinDir() + "/zeroshard-train",
            "--config=" + dir.WriteConfig(name + ".json", cfg),
            "--out=" + dir.path(name), "--quiet",
            "--server_addresses=" + absl::StrJoin(addresses, ",")};
  o.argv.insert(o.argv.end(), extra.begin(), extra.end());
  o.stdout_mode = SubprocessOptions::Output::kDiscard;
  o.stderr_mode = SubprocessOptions::Output::kFile;
  o.stderr_path = b.err_path;
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) b.process = *std::move(p);
  return b;
}

// One proxy in front of each server; the proxies' addresses in order.
::testing::AssertionResult ProxyEach(
    const std::vector<std::string>& servers,
    std::vector<std::unique_ptr<TcpProxy>>* proxies,
    std::vector<std::string>* addresses) {
  for (const std::string& a : servers) {
    auto p = TcpProxy::Start(a);
    if (!p.ok()) return ::testing::AssertionFailure() << p.status();
    addresses->push_back((*p)->address());
    proxies->push_back(*std::move(p));
  }
  return ::testing::AssertionSuccess();
}

// Waits (bounded) until the run has written `rows` metrics rows.
bool WaitForRows(const std::string& out, size_t rows, Subprocess* p) {
  return WaitForStep(out, rows, *p, absl::Seconds(60)).ok;
}

TEST(ConnectionFaultTest, AStalledServerEndsTheRunWithinItsDeadline) {
  TrainDir dir("stall");
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  std::vector<std::string> addresses;
  ASSERT_TRUE(ProxyEach((*cluster)->addresses(), &proxies, &addresses));
  Background run = StartTrain(dir, "out", Config(100000), addresses, {});
  ASSERT_NE(run.process, nullptr);
  ASSERT_TRUE(WaitForRows(dir.path("out"), 3, run.process.get()))
      << ReadAll(run.err_path);
  const absl::Time stalled = absl::Now();
  proxies[1]->Stall();
  // The step timeout, the launcher's settle and stop, and slack for a
  // loaded machine.
  const absl::Duration bound = absl::Seconds(3 * kStepSeconds + 20);
  absl::StatusOr<ExitStatus> st = run.process->Wait(bound);
  ASSERT_TRUE(st.ok()) << "zeroshard-train still running "
                       << absl::FormatDuration(bound) << " after the stall";
  const double after = absl::ToDoubleSeconds(absl::Now() - stalled);
  const std::string err = ReadAll(run.err_path);
  EXPECT_FALSE(st->success()) << err;
  EXPECT_TRUE(err.find("DEADLINE_EXCEEDED") != std::string::npos ||
              err.find("no progress") != std::string::npos)
      << err;
  std::printf("the run ended %.1f s after the stall (step timeout %.0f s)\n",
              after, kStepSeconds);
  proxies[1]->Resume();
}

TEST(ConnectionFaultTest, DroppedConnectionsHealOrFailButNeverCorrupt) {
  TrainDir dir("drop");
  constexpr uint64_t kSteps = 40;
  // The reference: the same cluster shape, no proxies, no faults.
  TrainRun ref = RunTrain({"--config=" + dir.WriteConfig("ref.json",
                                                         Config(kSteps)),
                           "--out=" + dir.path("ref"), "--save_weights",
                           "--quiet"},
                          absl::Seconds(240));
  ASSERT_TRUE(ref.status.success()) << ref.err;
  EXPECT_EQ(NotTrained(dir.path("ref"), Config(kSteps)), "");
  auto cluster = LocalCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  std::vector<std::string> addresses;
  ASSERT_TRUE(ProxyEach((*cluster)->addresses(), &proxies, &addresses));
  Background run = StartTrain(dir, "out", Config(kSteps), addresses,
                              {"--save_weights", "--max_restarts=5"});
  ASSERT_NE(run.process, nullptr);
  ASSERT_TRUE(WaitForRows(dir.path("out"), 2, run.process.get()))
      << ReadAll(run.err_path);
  for (int i = 0; i < 3; ++i) {
    proxies[i % 2]->Drop();
    absl::SleepFor(absl::Milliseconds(150));
  }
  const absl::Duration bound = absl::Seconds(120);
  absl::StatusOr<ExitStatus> st = run.process->Wait(bound);
  ASSERT_TRUE(st.ok()) << "zeroshard-train still running "
                       << absl::FormatDuration(bound) << " after the drops";
  const std::string err = ReadAll(run.err_path);
  if (st->success()) {
    WeightDiff d = CompareWeights(ReadWeights(dir.path("out")),
                                  ReadWeights(dir.path("ref")));
    EXPECT_TRUE(d.bit_identical) << "max_abs " << d.max_abs << " in "
                                 << d.worst_tensor << "\n" << err;
    const size_t at = err.find("restarts ");
    std::printf("the run healed; %d connections made through the proxies; "
                "%s\n",
                proxies[0]->accepted() + proxies[1]->accepted(),
                at == std::string::npos ? "no restart"
                                        : err.substr(at, err.find('\n', at) - at).c_str());
  } else {
    // A clear error naming what failed, not a hang or a crash.
    EXPECT_TRUE(st->exited) << st->ToString();
    EXPECT_NE(err.find("FAILED"), std::string::npos) << err;
    std::printf("the run failed cleanly:\n%s\n", err.c_str());
  }
}

}  // namespace
}  // namespace zeroshard::testing
