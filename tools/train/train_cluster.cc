#include "tools/train/train_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
// With replicas, how many times one server is started again at its address.
constexpr int kMaxReplacements = 3;
// After a first failure, how long to wait for others to show before the
// report is written (a dying server usually takes workers with it).
constexpr absl::Duration kSettle = absl::Milliseconds(300);

// Threads for each of `processes` sharing this machine's cores, unless the
// user set the variable.
std::vector<std::pair<std::string, std::string>> ThreadEnv(const char* var,
                                                           int processes) {
  if (const char* set = std::getenv(var); set != nullptr && *set != '\0') {
    return {};
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int per = std::max(1, static_cast<int>(hw) / std::max(processes, 1));
  return {{var, absl::StrCat(per)}};
}

}  // namespace

std::string LastLineOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - 65536);
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  absl::string_view rest = absl::StripTrailingAsciiWhitespace(text);
  const size_t nl = rest.rfind('\n');
  if (nl != absl::string_view::npos) rest.remove_prefix(nl + 1);
  return std::string(absl::StripAsciiWhitespace(rest));
}

absl::StatusOr<std::unique_ptr<TrainCluster>> TrainCluster::Start(
    const TrainClusterPlan& plan, const std::atomic<bool>* interrupted) {
  if (plan.servers < 1 || plan.workers < 1) {
    return absl::InvalidArgumentError("servers and workers must be >= 1");
  }
  std::unique_ptr<TrainCluster> c(new TrainCluster(plan, interrupted));
  std::error_code ec;
  std::filesystem::create_directories(c->logs_dir(), ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", c->logs_dir(), ": ", ec.message()));
  }
  RETURN_IF_ERROR(c->StartServers());
  RETURN_IF_ERROR(c->StartWorkers());
  RETURN_IF_ERROR(c->WriteClusterFile());
  return c;
}

TrainCluster::~TrainCluster() { StopAll(absl::Seconds(2)); }

absl::Status TrainCluster::StartServers() {
  if (!plan_.server_addresses.empty()) {
    addresses_ = plan_.server_addresses;
    return absl::OkStatus();
  }
  const std::string ports = plan_.out_dir + "/ports";
  std::error_code ec;
  std::filesystem::create_directories(ports, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", ports, ": ", ec.message()));
  }
  std::vector<std::string> port_files;
  for (int k = 0; k < plan_.servers; ++k) {
    Child c;
    c.name = absl::StrCat("server ", k);
    c.is_server = true;
    c.log_path = absl::StrCat(logs_dir(), "/server", k, ".log");
    port_files.push_back(PortFile(k));
    std::filesystem::remove(port_files.back(), ec);  // a previous run's
    RETURN_IF_ERROR(
        StartChild(ServerProcess(k, "127.0.0.1:0", port_files.back()), &c));
    servers_.push_back(std::move(c));
  }
  const absl::Time deadline = absl::Now() + plan_.startup_timeout;
  for (int k = 0; k < plan_.servers; ++k) {
    while (true) {
      if (Interrupted()) return absl::CancelledError("interrupted");
      absl::StatusOr<int> port = WaitForPortFile(
          port_files[k], std::min(kPollInterval, deadline - absl::Now()),
          servers_[k].process.get());
      if (port.ok()) {
        addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
        servers_[k].name = absl::StrCat("server ", k, " (", addresses_.back(),
                                        ")");
        break;
      }
      PollAll();
      if (Failed(servers_[k])) return FailureStatus();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            servers_[k].name, " did not start serving within ",
            absl::FormatDuration(plan_.startup_timeout),
            " (config key \"zeroshard.timeouts.startup_seconds\"; log: ",
            servers_[k].log_path, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TrainCluster::StartWorkers() {
  const std::string server_list = absl::StrJoin(addresses_, ",");
  for (int r = 0; r < plan_.workers; ++r) {
    Child c;
    c.name = absl::StrCat("worker rank ", r);
    c.log_path = absl::StrCat(logs_dir(), "/worker", r, ".log");
    SubprocessOptions o;
    o.argv = {plan_.bin_dir + "/zeroshard-worker", absl::StrCat("--rank=", r),
              absl::StrCat("--world_size=", plan_.workers),
              "--servers=" + server_list, "--config=" + plan_.config_path,
              "--run_id=" + plan_.run_id,
              r == 0 ? "--role=admin" : "--role=worker",
              absl::StrCat("--attempt=", plan_.attempt)};
    if (!plan_.resume_dir.empty()) {
      o.argv.push_back("--resume=" + plan_.resume_dir);
    }
    if (!plan_.credentials_dir.empty()) {
      o.argv.push_back("--credentials=" + plan_.credentials_dir);
    }
    if (!plan_.init_from.empty()) {
      o.argv.push_back("--init_from=" + plan_.init_from);
    }
    if (r == 0 && plan_.attempt == 0 &&
        plan_.inject_partial_apply_at_step >= 0) {
      o.argv.push_back(absl::StrCat("--inject_partial_apply_at_step=",
                                    plan_.inject_partial_apply_at_step));
    }
    if (plan_.inject_overflow_at_step >= 0) {
      o.argv.push_back(absl::StrCat("--inject_overflow_at_step=",
                                    plan_.inject_overflow_at_step));
    }
    o.stdout_mode = r == 0 ? SubprocessOptions::Output::kPipe
                           : SubprocessOptions::Output::kDiscard;
    o.env = ThreadEnv("OMP_NUM_THREADS", plan_.workers);
    RETURN_IF_ERROR(StartChild(std::move(o), &c));
    workers_.push_back(std::move(c));
  }
  return absl::OkStatus();
}

absl::Status TrainCluster::StartChild(SubprocessOptions options,
                                      Child* child) {
  options.stderr_mode = SubprocessOptions::Output::kFile;
  options.stderr_path = child->log_path;
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(options);
  if (!p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat("cannot start ", child->name, ": ",
                                     p.status().message()));
  }
  child->process = std::move(*p);
  return absl::OkStatus();
}

std::string TrainCluster::PortFile(int k) const {
  return absl::StrCat(plan_.out_dir, "/ports/server", k, ".port");
}

SubprocessOptions TrainCluster::ServerProcess(
    int k, const std::string& listen, const std::string& port_file) const {
  SubprocessOptions o;
  o.argv = {plan_.bin_dir + "/zeroshard-server", "--listen=" + listen,
            absl::StrCat("--server_index=", k),
            absl::StrCat("--num_servers=", plan_.servers),
            absl::StrCat("--placement=", PlacementName(plan_.placement)),
            "--port_file=" + port_file};
  if (plan_.credentials_dir.empty()) {
    o.argv.push_back("--no_auth");
  } else {
    o.argv.push_back("--credentials=" + plan_.credentials_dir);
  }
  o.stdout_mode = SubprocessOptions::Output::kDiscard;
  o.env = ThreadEnv("ZEROSHARD_OPTIMIZER_THREADS", plan_.servers);
  return o;
}

void TrainCluster::ReplaceServer(int k) {
  Child& c = servers_[k];
  const std::string why = Describe(c);
  std::error_code ec;
  std::filesystem::rename(
      c.log_path, absl::StrCat(c.log_path, ".replaced", c.replacements + 1),
      ec);
  const std::string port_file = PortFile(k);
  std::filesystem::remove(port_file, ec);
  Child next;
  next.name = c.name;
  next.log_path = c.log_path;
  next.is_server = true;
  next.replacements = c.replacements + 1;
  if (absl::Status s = StartChild(ServerProcess(k, addresses_[k], port_file),
                                  &next);
      !s.ok()) {
    ZS_LOG(WARNING) << "could not start a replacement for " << c.name << ": "
                    << s;
    return;
  }
  c = std::move(next);
  ZS_LOG(WARNING) << why << "; its slots go on from their other copies, and "
                  << "a replacement listens at its address (rank 0 catches "
                  << "it up from a checkpoint when it finds it)";
  if (absl::Status s = WriteClusterFile(); !s.ok()) {
    ZS_LOG(WARNING) << "cluster.json: " << s;
  }
}

void TrainCluster::PollAll() {
  for (std::vector<Child>* group : {&servers_, &workers_}) {
    for (Child& c : *group) {
      if (c.exit.has_value() || c.process == nullptr) continue;
      c.exit = c.process->Poll();
      if (c.exit.has_value()) c.exit_seen = absl::Now();
    }
  }
  // With replicas, a dead server whose neighbours live is replaced at its
  // address (at most kMaxReplacements times), once every server started.
  if (plan_.replicas < 2 || !plan_.server_addresses.empty() ||
      addresses_.size() != servers_.size()) {
    return;
  }
  for (int k = 0; k < static_cast<int>(servers_.size()); ++k) {
    Child& c = servers_[k];
    if (!c.exit.has_value() || Failed(c)) continue;
    if (c.replacements >= kMaxReplacements) {
      if (!c.said_gone) {
        ZS_LOG(WARNING) << Describe(c)
                        << "; its slots go on from their other copies (no "
                           "more replacements for it)";
        c.said_gone = true;
      }
      continue;
    }
    ReplaceServer(k);
  }
}

bool TrainCluster::Failed(const Child& c) const {
  if (!c.exit.has_value()) return false;
  if (!c.is_server) return !c.exit->success();
  if (plan_.replicas < 2 || !plan_.server_addresses.empty()) return true;
  // With two copies of each slot, a dead server's slots live on the
  // servers next to it: a failure once one of those died too.
  const int S = static_cast<int>(servers_.size());
  const int k = static_cast<int>(&c - servers_.data());
  return servers_[(k + 1) % S].exit.has_value() ||
         servers_[(k + S - 1) % S].exit.has_value();
}

std::string TrainCluster::Describe(const Child& c) const {
  std::string s = absl::StrCat(c.name, " ", c.exit->ToString());
  if (c.exit->exited) {
    const std::string last = LastLineOf(c.log_path);
    if (!last.empty()) absl::StrAppend(&s, ": ", last);
  }
  absl::StrAppend(&s, " (log: ", c.log_path, ")");
  return s;
}

absl::Status TrainCluster::FailureStatus() {
  const absl::Time settle_until = absl::Now() + kSettle;
  while (absl::Now() < settle_until) {
    PollAll();
    absl::SleepFor(absl::Milliseconds(20));
  }
  PollAll();
  std::vector<const Child*> failed;
  for (const std::vector<Child>* group : {&servers_, &workers_}) {
    for (const Child& c : *group) {
      if (Failed(c)) failed.push_back(&c);
    }
  }
  if (failed.empty()) return absl::OkStatus();
  // The cause before its symptoms: a process killed by a signal (kill -9,
  // the OOM killer) before the peers that then lost their connection to it
  // and exited with an error, each group in the order their exits were seen
  // (two exits within one poll would otherwise come in either order).
  std::stable_sort(failed.begin(), failed.end(),
                   [](const Child* a, const Child* b) {
                     const bool ka = !a->exit->exited, kb = !b->exit->exited;
                     if (ka != kb) return ka;
                     return a->exit_seen < b->exit_seen;
                   });
  std::string msg = Describe(*failed[0]);
  for (size_t i = 1; i < failed.size(); ++i) {
    absl::StrAppend(&msg, i == 1 ? "; then " : "; ", Describe(*failed[i]));
  }
  return failed[0]->is_server ? absl::UnavailableError(msg)
                              : absl::AbortedError(msg);
}

absl::Status TrainCluster::CheckProcesses() {
  PollAll();
  for (const std::vector<Child>* group : {&servers_, &workers_}) {
    for (const Child& c : *group) {
      if (Failed(c)) return FailureStatus();
    }
  }
  return absl::OkStatus();
}

std::string TrainCluster::StuckChildren() const {
  std::string out;
  for (const std::vector<Child>* group : {&servers_, &workers_}) {
    for (const Child& c : *group) {
      if (c.exit.has_value() || c.process == nullptr) continue;
      // /proc/<pid>/stat: "pid (comm) S ...", the state after the last ')'.
      std::ifstream in(absl::StrCat("/proc/", c.process->pid(), "/stat"));
      std::string stat((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size()) continue;
      const char state = stat[paren + 2];
      if (state == 'T' || state == 't') {
        absl::StrAppend(&out, "; ", c.name, " is stopped (SIGSTOP or a debugger)");
      } else if (state == 'D') {
        absl::StrAppend(&out, "; ", c.name, " is in uninterruptible sleep");
      }
    }
  }
  return out;
}

absl::StatusOr<std::string> TrainCluster::NextProgressLine(
    absl::Duration timeout, const std::string& waiting_for) {
  Child& rank0 = workers_[0];
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (Interrupted()) return absl::CancelledError("interrupted");
    RETURN_IF_ERROR(CheckProcesses());
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no progress for ", absl::FormatDuration(timeout), " waiting for ",
          waiting_for, " from worker rank 0, while all ", workers_.size(),
          " workers and ", servers_.size(),
          " started servers are still running: a worker or server hung",
          StuckChildren(),
          " (limit: config key \"zeroshard.timeouts.step_seconds\"; logs in ",
          logs_dir(), ")"));
    }
    absl::StatusOr<std::string> line =
        rank0.process->ReadLine(std::min(left, kPollInterval));
    if (line.ok()) return line;
    if (absl::IsDeadlineExceeded(line.status())) continue;
    if (!absl::IsOutOfRange(line.status())) return line.status();
    // Rank 0 closed its stdout: it is ending. Give it a bounded moment.
    rank0.process->Wait(absl::Seconds(10)).IgnoreError();
    RETURN_IF_ERROR(CheckProcesses());
    return absl::AbortedError(absl::StrCat(
        "worker rank 0 ended its output before finishing (",
        rank0.exit.has_value() ? rank0.exit->ToString() : "still running",
        "; log: ", rank0.log_path, ")"));
  }
}

absl::Status TrainCluster::WaitWorkers(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (Interrupted()) return absl::CancelledError("interrupted");
    RETURN_IF_ERROR(CheckProcesses());
    bool all = true;
    for (const Child& w : workers_) all = all && w.exit.has_value();
    if (all) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      std::vector<std::string> running;
      for (const Child& w : workers_) {
        if (!w.exit.has_value()) running.push_back(w.name);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          absl::StrJoin(running, ", "), " did not exit within ",
          absl::FormatDuration(timeout), " after training finished"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

bool TrainCluster::ServersAlive() {
  PollAll();
  for (const Child& c : servers_) {
    // A replaced server's state is whatever rank 0 restored into it, if it
    // got that far: a restart of the workers alone cannot rely on it.
    if (c.exit.has_value() || c.replacements > 0) return false;
  }
  return true;
}

void TrainCluster::StopWorkers() {
  for (Child& c : workers_) {
    if (c.process != nullptr) c.process->Stop(absl::ZeroDuration());
    std::error_code ec;
    std::filesystem::rename(c.log_path,
                            absl::StrCat(c.log_path, ".", plan_.attempt), ec);
  }
  workers_.clear();
}

absl::Status TrainCluster::RestartWorkers(uint64_t attempt) {
  StopWorkers();
  plan_.attempt = attempt;
  RETURN_IF_ERROR(StartWorkers());
  return WriteClusterFile();
}

void TrainCluster::StopAll(absl::Duration grace) {
  std::vector<Child*> live;
  for (std::vector<Child>* group : {&workers_, &servers_}) {
    for (Child& c : *group) {
      if (c.process != nullptr && !c.process->Poll().has_value()) {
        c.process->Signal(SIGTERM).IgnoreError();
        c.process->Signal(SIGCONT).IgnoreError();  // a stopped child too
        live.push_back(&c);
      }
    }
  }
  const absl::Time deadline = absl::Now() + grace;
  for (Child* c : live) {
    c->process->Wait(std::max(absl::ZeroDuration(), deadline - absl::Now()))
        .IgnoreError();
    c->process->Stop(absl::ZeroDuration());  // SIGKILL if still running
  }
}

void TrainCluster::KeepLogs() {
  for (std::vector<Child>* group : {&workers_, &servers_}) {
    for (const Child& c : *group) {
      std::error_code ec;
      std::filesystem::rename(c.log_path,
                              absl::StrCat(c.log_path, ".", plan_.attempt), ec);
    }
  }
}

absl::Status TrainCluster::WriteClusterFile() const {
  nlohmann::json j;
  j["run_id"] = plan_.run_id;
  // Where the run's tokens are, for zeroshard-ctl --cluster (empty: none).
  j["credentials"] = plan_.credentials_dir;
  j["servers"] = nlohmann::json::array();
  for (size_t k = 0; k < addresses_.size(); ++k) {
    nlohmann::json s = {{"index", k}, {"address", addresses_[k]}};
    if (k < servers_.size()) {
      s["pid"] = servers_[k].process->pid();
      s["log"] = servers_[k].log_path;
    }
    j["servers"].push_back(std::move(s));
  }
  j["workers"] = nlohmann::json::array();
  for (size_t r = 0; r < workers_.size(); ++r) {
    j["workers"].push_back({{"rank", r},
                            {"pid", workers_[r].process->pid()},
                            {"log", workers_[r].log_path}});
  }
  const std::string path = plan_.out_dir + "/cluster.json";
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(1) << "\n";
  out.close();
  if (!out) return absl::PermissionDeniedError("cannot write " + path);
  return absl::OkStatus();
}

}  // namespace zeroshard
