// zeroshard-ctl estimate as a program (bad input is a usage error, --json
// carries the ZeRO-1 correction), and the estimate against a real run: the
// peak RSS (VmHWM) of every server and worker of a short zeroshard-train run
// must lie within 10% of model/memory_estimate's resident estimate for the
// same config.
//
// Peak RSS is sampled from /proc/<pid>/status of zeroshard-train's children
// every 20 ms while they run (a reaped process has no VmHWM). VmHWM only
// grows, and every step reaches the same peak, so the last sample of a
// worker that ran several steps is its peak.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "model/memory_estimate.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/train_harness.h"
#include "tests/support/sanitizers.h"

namespace zeroshard::testing {
namespace {

constexpr double kTolerance = 0.10;

CommandResult Ctl(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"estimate"};
  all.insert(all.end(), args.begin(), args.end());
  absl::StatusOr<CommandResult> r =
      RunBinary("zeroshard-ctl", all, absl::Seconds(30));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult{};
}

TEST(EstimateCtlTest, BadInputIsAUsageError) {
  const std::vector<std::vector<std::string>> bad = {
      {"--params=0", "--workers=8", "--servers=4"},
      {"--params=-7e9", "--workers=8", "--servers=4"},
      {"--params=7e9", "--workers=0", "--servers=4"},
      {"--params=7e9", "--workers=8", "--servers=0"},
      {"--params=7e9", "--workers=8", "--servers=four"},
      {"--params=7e9", "--workers=8", "--servers=4", "--stage=4"},
      {"--params=7e9", "--workers=8", "--servers=4", "--precision=int8"},
      {"--params=7e9", "--workers=8", "--servers=4", "--link_gbps=0"},
      {"--params=7e9", "--workers=8", "--servers=4", "--attention=fused"},
      {"--workers=8", "--servers=4"},  // no Ψ and no shape
      {"--params=7e9", "--config=/nonexistent.json"},
      // Ψ from the flag and a shape from the file: refused, not mixed.
      {"--params=124e6", "--config=examples/gpt-small.json"},
      {"--params=124e6", "--layers=12"},
  };
  for (const auto& args : bad) {
    CommandResult r = Ctl(args);
    EXPECT_TRUE(r.status.exited) << r.status.ToString();
    EXPECT_NE(r.status.code, 0) << args.back();
    EXPECT_NE(r.err.find("estimate:"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// --torch_units (the PyTorch front-end's rank) and its stage3_* flags: each
// bad value is refused naming what was wrong, and nothing is printed.
TEST(EstimateCtlTest, BadTorchRankInputIsAUsageError) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--torch_units=0,5"}, "\"0\" is not a positive element count"},
      {{"--torch_units=5,abc"}, "\"abc\" is not a positive element count"},
      {{"--torch_units=5", "--stage=4"}, "stage must be 1, 2 or 3"},
      {{"--torch_units=5", "--workers=0"}, "workers must be >= 1"},
      {{"--torch_units=5", "--precision=int8"}, "got 'int8'"},
      {{"--torch_units=5", "--stage3_max_live_parameters=-5"},
       "flag 'stage3_max_live_parameters'"},
      {{"--torch_units=5", "--stage3_prefetch_bucket_size=x"},
       "flag 'stage3_prefetch_bucket_size'"},
  };
  for (const auto& [args, why] : bad) {
    CommandResult r = Ctl(args);
    EXPECT_TRUE(r.status.exited) << r.status.ToString();
    EXPECT_NE(r.status.code, 0) << args.back();
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(EstimateCtlTest, SevenBillionJsonAndText) {
  CommandResult r =
      Ctl({"--params=7e9", "--workers=8", "--servers=4", "--json"});
  ASSERT_TRUE(r.status.success()) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["zero"].size(), 4u);
  EXPECT_EQ(j["zero"][1]["formula"], "4Ψ + 12Ψ/N");
  EXPECT_DOUBLE_EQ(j["zero"][1]["per_gpu_bytes"].get<double>(), 38.5e9);
  EXPECT_DOUBLE_EQ(j["zero"][0]["per_gpu_bytes"].get<double>(), 112e9);
  EXPECT_NE(j["zero1_note"].get<std::string>().find("16Ψ"), std::string::npos);
  EXPECT_DOUBLE_EQ(
      j["zeroshard"]["server"]["stage3"]["model_state_bytes"].get<double>(),
      14 * 7e9 / 4);
  r = Ctl({"--params=7e9", "--workers=8", "--servers=4"});
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_NE(r.out.find("ZeRO-1 *"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("* ZeRO-1 partitions only the optimizer states"),
            std::string::npos) << r.out;
}

// --device_gb gives a verdict: GPT-2 124M's shape at micro batch 8 fits in
// 80 GB and not in 1 GB, each by the amount the JSON states.
TEST(EstimateCtlTest, DeviceMemoryGivesAVerdict) {
  const std::vector<std::string> shape = {
      "--layers=12", "--heads=12", "--width=768", "--vocab=50304",
      "--context=1024", "--micro_batch=8", "--workers=8", "--servers=4"};
  for (const char* gb : {"80", "1"}) {
    std::vector<std::string> args = shape;
    args.push_back(absl::StrCat("--device_gb=", gb));
    CommandResult text = Ctl(args);
    ASSERT_TRUE(text.status.success()) << text.err;
    args.push_back("--json");
    CommandResult json = Ctl(args);
    ASSERT_TRUE(json.status.success()) << json.err;
    const nlohmann::json d = nlohmann::json::parse(json.out)["device"];
    const bool fits = std::string(gb) == "80";
    EXPECT_EQ(d["fits"].get<bool>(), fits) << d;
    EXPECT_DOUBLE_EQ(d["memory_bytes"].get<double>(), std::stod(gb) * 1e9);
    EXPECT_DOUBLE_EQ(d["margin_bytes"].get<double>(),
                     d["memory_bytes"].get<double>() -
                         d["worker_needs_bytes"].get<double>());
    // What a worker needs is its resident estimate, activations and kernel
    // scratch counted once (they are among its terms).
    const nlohmann::json w =
        nlohmann::json::parse(json.out)["zeroshard"]["worker"]["stage3"];
    EXPECT_DOUBLE_EQ(d["worker_needs_bytes"].get<double>(),
                     w["total_bytes"].get<double>());
    int activation_terms = 0;
    for (const nlohmann::json& t : w["terms"]) {
      activation_terms += t["name"] == "activations (policy)" ||
                          t["name"] == "kernel scratch (FP32)";
    }
    EXPECT_EQ(activation_terms, 2) << w;
    EXPECT_NE(text.out.find(absl::StrCat("A worker in ", gb, " GB (stage 3, "
                                         "activations included): ",
                                         fits ? "fits" : "does NOT fit")),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find(fits ? "leaving" : "short by"), std::string::npos)
        << text.out;
  }
  CommandResult bad = Ctl({"--params=7e9", "--workers=8", "--servers=4",
                           "--device_gb=-1"});
  EXPECT_EQ(bad.status.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device_gb"), std::string::npos) << bad.err;
}

TEST(EstimateCtlTest, OnlineAttentionIsCountedWhenAsked) {
  const std::vector<std::string> shape = {
      "--layers=12", "--heads=12", "--width=768", "--vocab=50304",
      "--context=1024", "--micro_batch=8", "--json"};
  std::vector<std::string> online = shape, flash = shape;
  online.push_back("--attention=online");
  flash.push_back("--attention=flash");
  CommandResult p = Ctl(shape), o = Ctl(online), f = Ctl(flash);
  ASSERT_TRUE(p.status.success()) << p.err;
  ASSERT_TRUE(o.status.success()) << o.err;
  ASSERT_TRUE(f.status.success()) << f.err;
  nlohmann::json jp = nlohmann::json::parse(p.out);
  nlohmann::json jo = nlohmann::json::parse(o.out);
  nlohmann::json jf = nlohmann::json::parse(f.out);
  EXPECT_EQ(jp["activations"]["attention"], "probs");
  EXPECT_EQ(jo["activations"]["attention"], "online");
  EXPECT_EQ(jf["activations"]["attention"], "flash");
  // Flash saves what online saves.
  EXPECT_EQ(jf["activations"]["per_block_internals_bytes"],
            jo["activations"]["per_block_internals_bytes"]);
  // B·H·T² BF16 probabilities out, B·H·T FP32 log-sum-exp in.
  EXPECT_DOUBLE_EQ(jp["activations"]["per_block_internals_bytes"].get<double>() -
                       jo["activations"]["per_block_internals_bytes"].get<double>(),
                   8.0 * 12 * 1024 * 1024 * 2 - 8.0 * 12 * 1024 * 4);
  online.pop_back();
  online.pop_back();  // --json: the text names the attention too
  online.push_back("--attention=online");
  CommandResult text = Ctl(online);
  ASSERT_TRUE(text.status.success()) << text.err;
  EXPECT_NE(text.out.find("online attention"), std::string::npos) << text.out;
}

// A /proc file's text, or "" when it cannot be read whole: a process that
// exits while it is read makes the read fail with ESRCH (which an ifstream
// turns into an exception), and such a process is simply not sampled.
std::string ReadProcFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      text.clear();
      break;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// VmHWM of every live child of `parent`, by pid, with its /proc comm.
void SampleChildren(pid_t parent, std::map<pid_t, std::pair<std::string, double>>* peak) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string text = ReadProcFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::istringstream status(ReadProcFile(absl::StrCat("/proc/", pid, "/status")));
    std::string line, name;
    double hwm = 0;
    while (std::getline(status, line)) {
      if (line.rfind("Name:", 0) == 0) name = line.substr(5);
      if (line.rfind("VmHWM:", 0) == 0) hwm = std::atof(line.c_str() + 6) * 1024;
    }
    if (hwm <= 0) continue;
    auto& p = (*peak)[pid];
    p.first = name;
    p.second = std::max(p.second, hwm);
  }
  closedir(d);
}

TEST(EstimateRssTest, ServersAndWorkersWithinTenPercent) {
  if (kAddressSanitizer) {
    GTEST_SKIP() << "RSS under AddressSanitizer includes its shadow memory; "
                    "the bound is checked in the plain build";
  }
  // FP32 AdamW, then 8-bit AdamW (the servers' state 8 instead of 14 bytes
  // an element; the workers the same).
  for (const std::string type : {"AdamW", "AdamW8bit"}) {
  SCOPED_TRACE(type);
  TrainDir dir("estimate_rss_" + type);
  nlohmann::json cfg = SmallConfig();
  cfg["optimizer"]["type"] = type;
  cfg["bf16"] = {{"enabled", true}};
  cfg["train_batch_size"] = 8;
  cfg["train_micro_batch_size_per_gpu"] = 4;
  cfg["zero_optimization"]["stage"] = 3;
  cfg["zeroshard"]["servers"] = 2;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = 3;
  // ~12.8 M parameters: model state well above the processes' base.
  cfg["zeroshard"]["model"] = {{"layers", 4}, {"heads", 8}, {"width", 512},
                               {"vocab", 256}, {"context", 128}};
  cfg["zeroshard"]["activation_checkpointing"] = {{"policy", "every_block"}};
  cfg["zeroshard"].erase("plot");
  const std::string path = dir.WriteConfig("rss.json", cfg);

  absl::StatusOr<ParsedConfig> parsed = LoadTrainingConfig(path);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const TrainingConfig& c = parsed->config;
  EstimateInput in;
  in.model = c.cluster.model;
  in.workers = c.cluster.workers;
  in.servers = c.cluster.servers;
  in.stage = c.zero.stage;
  in.precision = c.precision;
  in.grad_wire = c.communication_data_type;
  in.micro_batch = c.micro_batch_size;
  in.grad_accum = c.gradient_accumulation_steps;
  in.checkpointing = c.activation_checkpointing.policy;
  in.optimizer = c.optimizer.kind;
  in.optimizer_rule = c.optimizer.rule;
  // zeroshard-train's servers share the workers' host.
  in.shared_memory = c.cluster.shared_memory;
  // This CPU's way of running BF16 products, as zeroshard-ctl estimate's
  // --bf16_gemm=auto takes it.
  in.bf16_gemm_widened = CpuWidensBf16Gemm();
  absl::StatusOr<MemoryEstimate> est = EstimateMemory(in);
  ASSERT_TRUE(est.ok()) << est.status();
  const double worker_est = est->worker[2].total();
  const double server_est = est->server[2].total();

  // No closing sample: it reads the weights through a consistent snapshot,
  // which the servers hold beside their state while it is read (as for
  // --save_weights): outside training, and outside what the estimate covers.
  SubprocessOptions opt;
  opt.argv = {BinDir() + "/zeroshard-train", "--config=" + path,
              "--out=" + dir.path("out"), "--quiet", "--sample=false"};
  opt.stdout_mode = SubprocessOptions::Output::kDiscard;
  opt.stderr_mode = SubprocessOptions::Output::kFile;
  opt.stderr_path = dir.path("train.err");
  absl::StatusOr<std::unique_ptr<Subprocess>> train = Subprocess::Start(opt);
  ASSERT_TRUE(train.ok()) << train.status();
  std::map<pid_t, std::pair<std::string, double>> peak;
  const absl::Time deadline = absl::Now() + absl::Seconds(240);
  std::optional<ExitStatus> done;
  while (!(done = (*train)->Poll()) && absl::Now() < deadline) {
    SampleChildren((*train)->pid(), &peak);
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (!done) done = (*train)->Stop(absl::Seconds(5));
  ASSERT_TRUE(done->success()) << done->ToString() << "\n"
                               << ReadFile(dir.path("train.err"));
  int servers = 0, workers = 0;
  for (const auto& [pid, p] : peak) {
    const bool server = p.first.find("zeroshard-serv") != std::string::npos;
    const bool worker = p.first.find("zeroshard-work") != std::string::npos;
    if (!server && !worker) continue;
    const double e = server ? server_est : worker_est;
    std::printf("%s (pid %d): peak RSS %.1f MiB, estimate %.1f MiB (%+.1f%%)\n",
                p.first.c_str(), pid, p.second / 1048576, e / 1048576,
                100 * (e - p.second) / p.second);
    EXPECT_LE(std::abs(e - p.second), kTolerance * p.second)
        << p.first << " pid " << pid << ": measured " << p.second / 1048576
        << " MiB, estimated " << e / 1048576 << " MiB";
    (server ? servers : workers)++;
  }
  EXPECT_EQ(servers, 2);
  EXPECT_EQ(workers, 2);
  }
}

}  // namespace
}  // namespace zeroshard::testing
