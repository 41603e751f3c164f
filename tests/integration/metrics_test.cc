// Metrics end to end: a real zeroshard-server and zeroshard-worker serve
// /metrics (--metrics_listen=127.0.0.1:0, the port read from
// --metrics_port_file), and a real Prometheus (Debian's `prometheus`
// package) scrapes both every second; the test reads metrics back through
// Prometheus's query API (/api/v1/query). Skips when prometheus is not
// installed. Also: the processes' log lines carry time and identity.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/atomic_file.h"
#include "common/config.h"
#include "common/resolved_config.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"
#include "tests/support/prometheus_text.h"

namespace zeroshard::testing {
namespace {

// GET http://127.0.0.1:port/path; "" on any failure.
std::string HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Result r = client.Get(path.c_str());
  if (!r || r->status != 200) return "";
  return r->body;
}

// /metrics of a process, parsed; an empty Exposition when unreachable.
Exposition Scrape(int port) {
  absl::StatusOr<Exposition> e = ParseExposition(HttpGet(port, "/metrics"));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : Exposition();
}

// A port that was free a moment ago (for Prometheus, which cannot report
// the port it bound for :0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string FindPrometheus() {
  if (const char* env = std::getenv("ZS_PROMETHEUS")) return env;
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string p = absl::StrCat(dir, "/prometheus");
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Runs a PromQL instant query; the result vector ([] on any failure).
nlohmann::json Query(int port, const std::string& promql) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(5, 0);
  httplib::Params params{{"query", promql}};
  httplib::Result r = client.Post("/api/v1/query", params);
  if (!r || r->status != 200) return nlohmann::json::array();
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") {
    return nlohmann::json::array();
  }
  return j["data"]["result"];
}

// Polls `promql` until it returns a non-empty vector, up to `timeout`.
nlohmann::json QueryUntilPresent(int port, const std::string& promql,
                                 absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  nlohmann::json result = nlohmann::json::array();
  while (absl::Now() < deadline) {
    result = Query(port, promql);
    if (!result.empty()) break;
    absl::SleepFor(absl::Milliseconds(500));
  }
  return result;
}

// "name{a="x"} value" lines of a query's result vector, for the log.
std::string Describe(const nlohmann::json& result) {
  std::string out;
  for (const auto& r : result) {
    absl::StrAppend(&out, r["metric"].dump(), " ", r["value"][1].dump(), "\n");
  }
  return out;
}

// A resolved config for 1 server and 1 worker that trains long enough to be
// scraped (the test stops the worker).
std::string WriteLongRunConfig(const TrainDir& dir) {
  nlohmann::json cfg = SmallConfig();
  cfg["zeroshard"]["steps"] = 100000;
  auto parsed = LoadTrainingConfig(dir.WriteConfig("c.json", cfg),
                                   {.servers = 1, .workers = 1});
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  const std::string path = dir.path("resolved.json");
  EXPECT_TRUE(
      WriteFileAtomically(path, ResolvedConfigJson(parsed->config)).ok());
  return path;
}

class MetricsTest : public ::testing::Test {
 protected:
  // One server and one training worker, both serving metrics.
  void StartServerAndWorker(const TrainDir& dir) {
    auto cluster = LocalCluster::Start(
        1, {"--metrics_listen=127.0.0.1:0",
            "--metrics_port_file=" + dir.path("server.mport")});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto sport = WaitForPortFile(dir.path("server.mport"), absl::Seconds(30));
    ASSERT_TRUE(sport.ok()) << sport.status() << "\n"
                            << ReadFile(cluster_->log_path(0));
    server_port_ = *sport;

    SubprocessOptions o;
    o.argv = {BinDir() + "/zeroshard-worker", "--rank=0", "--world_size=1",
              "--servers=" + cluster_->server_list(),
              "--config=" + WriteLongRunConfig(dir), "--run_id=metrics",
              "--hostname=127.0.0.1", "--threads=1",
              "--metrics_listen=127.0.0.1:0",
              "--metrics_port_file=" + dir.path("worker.mport")};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path = dir.path("worker.log");
    auto p = Subprocess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    worker_ = *std::move(p);
    auto wport = WaitForPortFile(dir.path("worker.mport"), absl::Seconds(30),
                                 worker_.get());
    ASSERT_TRUE(wport.ok()) << wport.status() << "\n"
                            << ReadFile(dir.path("worker.log"));
    worker_port_ = *wport;
    // Bounded: until the worker has finished a step.
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (absl::Now() < deadline) {
      const auto steps = Scrape(worker_port_).Value("zeroshard_steps_total");
      if (steps.has_value() && *steps >= 1) return;
      ASSERT_FALSE(worker_->Poll().has_value())
          << "the worker ended: " << ReadFile(dir.path("worker.log"));
      absl::SleepFor(absl::Milliseconds(200));
    }
    FAIL() << "no step in 120 s: " << ReadFile(dir.path("worker.log"));
  }

  void TearDown() override {
    if (worker_ != nullptr) worker_->Stop(absl::Seconds(5));
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Subprocess> worker_;
  int server_port_ = 0;
  int worker_port_ = 0;
};

TEST_F(MetricsTest, ServerAndWorkerServeTheirMetrics) {
  TrainDir dir("metrics_direct");
  ASSERT_NO_FATAL_FAILURE(StartServerAndWorker(dir));
  const Exposition server = Scrape(server_port_);
  EXPECT_EQ(server.Value("zeroshard_initialized"), 1);
  EXPECT_EQ(server.types.at("zeroshard_rpc_duration_seconds"), "histogram");
  const auto gathers = server.Value("zeroshard_rpc_duration_seconds_count",
                                    {{"method", "Gather"}, {"code", "OK"}});
  ASSERT_TRUE(gathers.has_value());
  EXPECT_GE(*gathers, 1);
  EXPECT_GT(*server.Value("zeroshard_rpc_sent_bytes_total"), 0);
  EXPECT_GT(*server.Value("zeroshard_rpc_received_bytes_total"), 0);
  EXPECT_GT(*server.Value("zeroshard_adamw_updated_elements_total"), 0);
  EXPECT_GE(*server.Value("zeroshard_chunk_version", {{"bound", "min"}}), 1);
  EXPECT_GT(*server.Value("zeroshard_state_bytes",
                          {{"placement", "host"}, {"kind", "master"}}),
            0);
  EXPECT_GT(*server.Value("zeroshard_process_resident_memory_bytes"), 0);

  const Exposition worker = Scrape(worker_port_);
  EXPECT_GE(*worker.Value("zeroshard_steps_total"), 1);
  EXPECT_EQ(worker.Value("zeroshard_skipped_steps_total"), 0);
  EXPECT_EQ(worker.Value("zeroshard_loss_scale"), 1);  // FP32: no scaling
  EXPECT_GT(*worker.Value("zeroshard_tokens_total"), 0);
  EXPECT_EQ(worker.types.at("zeroshard_step_duration_seconds"), "histogram");
  EXPECT_EQ(HttpGet(worker_port_, "/nothing"), "");

  // Log lines: UTC time and the process identity.
  const std::regex server_line(
      "^I20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z server 0 "
      "[a-z_]+\\.cc:[0-9]+\\] serving metrics on port ");
  const std::regex worker_line(
      "^I20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z worker 0 "
      "[a-z_]+\\.cc:[0-9]+\\] serving metrics on port ");
  auto has_line = [](const std::string& log, const std::regex& re) {
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (std::regex_search(std::string(line), re)) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_line(ReadFile(cluster_->log_path(0)), server_line))
      << ReadFile(cluster_->log_path(0));
  EXPECT_TRUE(has_line(ReadFile(dir.path("worker.log")), worker_line))
      << ReadFile(dir.path("worker.log"));
}

TEST_F(MetricsTest, PrometheusScrapesServerAndWorker) {
  const std::string prometheus = FindPrometheus();
  if (prometheus.empty()) {
    GTEST_SKIP() << "prometheus is not installed (Debian package "
                    "'prometheus'; scripts/install-deps.sh installs it)";
  }
  TrainDir dir("metrics_prom");
  ASSERT_NO_FATAL_FAILURE(StartServerAndWorker(dir));
  const std::string config = dir.WriteText(
      "prometheus.yml",
      absl::StrCat("global:\n"
                   "  scrape_interval: 1s\n"
                   "  scrape_timeout: 1s\n"
                   "  evaluation_interval: 1s\n"
                   "scrape_configs:\n"
                   "  - job_name: zeroshard-server\n"
                   "    static_configs:\n"
                   "      - targets: ['127.0.0.1:", server_port_, "']\n"
                   "  - job_name: zeroshard-worker\n"
                   "    static_configs:\n"
                   "      - targets: ['127.0.0.1:", worker_port_, "']\n"));
  std::filesystem::create_directories(dir.path("tsdb"));
  std::unique_ptr<Subprocess> prom;
  int prom_port = 0;
  // The free port may be taken between probing and binding: a few tries.
  for (int attempt = 0; attempt < 3 && prom == nullptr; ++attempt) {
    prom_port = FreePort();
    ASSERT_NE(prom_port, 0);
    SubprocessOptions o;
    o.argv = {prometheus, "--config.file=" + config,
              "--storage.tsdb.path=" + dir.path("tsdb"),
              absl::StrCat("--web.listen-address=127.0.0.1:", prom_port),
              "--log.level=warn"};
    o.stdout_mode = SubprocessOptions::Output::kDiscard;
    o.stderr_mode = SubprocessOptions::Output::kFile;
    o.stderr_path = dir.path(absl::StrCat("prometheus", attempt, ".log"));
    auto p = Subprocess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    // Ready when its readiness endpoint answers (bounded).
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    bool ready = false;
    while (!ready && absl::Now() < deadline && !(*p)->Poll().has_value()) {
      ready = HttpGet(prom_port, "/-/ready") != "";
      if (!ready) absl::SleepFor(absl::Milliseconds(200));
    }
    if (ready) {
      prom = *std::move(p);
    } else {
      (*p)->Stop(absl::Seconds(5));
      ADD_FAILURE_AT(__FILE__, __LINE__)
          << "prometheus did not become ready: " << ReadFile(o.stderr_path);
    }
  }
  ASSERT_NE(prom, nullptr);

  // Both targets scraped and up.
  const nlohmann::json up = QueryUntilPresent(
      prom_port, "count(up == 1) == 2", absl::Seconds(60));
  EXPECT_FALSE(up.empty()) << Describe(Query(prom_port, "up"));

  const nlohmann::json steps = QueryUntilPresent(
      prom_port, "zeroshard_steps_total{job=\"zeroshard-worker\"} >= 1",
      absl::Seconds(60));
  ASSERT_FALSE(steps.empty());
  std::cout << "prometheus: " << Describe(steps);
  EXPECT_EQ(steps[0]["metric"]["job"], "zeroshard-worker");
  EXPECT_GE(std::stod(steps[0]["value"][1].get<std::string>()), 1);

  const nlohmann::json gathers = QueryUntilPresent(
      prom_port,
      "zeroshard_rpc_duration_seconds_count{job=\"zeroshard-server\","
      "method=\"Gather\",code=\"OK\"} > 0",
      absl::Seconds(30));
  EXPECT_FALSE(gathers.empty());
  std::cout << "prometheus: " << Describe(gathers);
  const nlohmann::json master = QueryUntilPresent(
      prom_port,
      "zeroshard_state_bytes{job=\"zeroshard-server\",kind=\"master\"} > 0",
      absl::Seconds(30));
  EXPECT_FALSE(master.empty());
  std::cout << "prometheus: " << Describe(master);
  const nlohmann::json updates = QueryUntilPresent(
      prom_port, "zeroshard_adamw_updated_elements_total > 0",
      absl::Seconds(30));
  EXPECT_FALSE(updates.empty());
  std::cout << "prometheus: " << Describe(updates);
  prom->Stop(absl::Seconds(10));
}

}  // namespace
}  // namespace zeroshard::testing
