#include "tests/support/shard_load.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/shard_client.h"
#include "common/dtype.h"
#include "common/init_values.h"
#include "common/layout.h"
#include "common/subprocess.h"
#include "optim/optimizer.h"
#include "wire/credentials.h"

namespace zeroshard::testing {
namespace {

constexpr char kRunId[] = "load-run";

// What step s does: the same for every client and the reference.
struct StepKind {
  double coefficient = 1;
  bool skip = false;
  bool known = false;  // coefficient in the header, not at the commit
  bool bf16 = false;   // gradients pushed in BF16
};
StepKind KindOf(uint32_t step) {
  static constexpr double kCoefficients[] = {1.0, 0.5, 0.25};
  return {kCoefficients[step % 3], step == 2, step % 2 == 1,
          (step / 2) % 2 == 1};
}

// The gradient of flat element i (inside `unit`) at `step`, rounded to BF16
// when the step pushes BF16.
float GradAt(const UnitInfo& unit, uint64_t i, uint64_t seed, uint32_t step,
             bool bf16) {
  if (i - unit.offset >= unit.numel) return 0.f;  // padding stays zero
  const float g = CounterNormal(seed * 1000003 + step + 1, i);
  return bf16 ? Bf16ToFloat(FloatToBf16(g)) : g;
}

ModelManifest LoadManifest(const ShardLoadOptions& o) {
  ModelManifest m;
  for (int u = 0; u < o.units; ++u) {
    m.units.push_back({absl::StrCat("unit_", u),
                       {{absl::StrCat("unit_", u, ".w"),
                         {static_cast<int64_t>(o.unit_elems)}}}});
  }
  m.partition_count = o.pushers;
  return m;
}

// Latencies of one thread, by kind; merged at the end.
enum CallKind { kGather, kPush, kInspect, kNumKinds };
constexpr const char* kKindNames[] = {"Gather", "PushGrad", "Inspect"};

struct ThreadLog {
  std::vector<double> us[kNumKinds];
  uint64_t calls = 0;
  uint64_t errors = 0;
  std::vector<std::string> messages;
  uint64_t mismatched = 0;
  uint64_t duplicates = 0;

  // Times `call`, which returns an absl::Status(Or).
  template <typename F>
  auto Timed(CallKind kind, F&& call) {
    const absl::Time t0 = absl::Now();
    auto result = call();
    us[kind].push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
    ++calls;
    absl::Status status;
    if constexpr (std::is_same_v<decltype(result), absl::Status>) {
      status = result;
    } else {
      status = result.status();
    }
    if (!status.ok()) {
      ++errors;
      if (messages.size() < 3) {
        messages.push_back(absl::StrCat(kKindNames[kind], ": ",
                                        status.ToString()));
      }
    }
    return result;
  }
};

uint64_t CountMismatches(const float* got, const float* want, uint64_t n) {
  if (std::memcmp(got, want, 4 * n) == 0) return 0;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    bad += std::memcmp(got + i, want + i, 4) != 0;
  }
  return bad;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t at = std::min(v.size() - 1,
                             static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + at, v.end());
  return v[at];
}

absl::StatusOr<std::shared_ptr<const ClientSecurity>> Security(
    const std::string& dir, Role role) {
  if (dir.empty()) return std::shared_ptr<const ClientSecurity>();
  return ClientSecurity::Load(dir, role);
}

}  // namespace

uint64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

absl::Status MakeDevCredentials(const std::string& dir) {
  std::string script = "scripts/make-dev-credentials.sh";
  if (!std::filesystem::exists(script)) {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    script = (exe.parent_path().parent_path().parent_path() / script).string();
    if (ec || !std::filesystem::exists(script)) {
      return absl::NotFoundError(
          "scripts/make-dev-credentials.sh not found: run from the source tree");
    }
  }
  SubprocessOptions so;
  so.argv = {"bash", script, dir};
  so.stdout_mode = SubprocessOptions::Output::kDiscard;
  auto p = Subprocess::Start(so);
  if (!p.ok()) return p.status();
  auto st = (*p)->Wait(absl::Seconds(60));
  if (!st.ok()) return st.status();
  if (!st->success()) {
    return absl::InternalError(absl::StrCat(script, " ", st->ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardLoadReport> RunShardLoad(const ShardLoadOptions& o) {
  if (o.pushers == 0 || o.num_servers < 1 || o.units < 1 ||
      o.unit_elems == 0) {
    return absl::InvalidArgumentError("load: empty cluster or model");
  }
  const int S = o.num_servers;
  absl::StatusOr<FlatLayout> made =
      FlatLayout::Create(LoadManifest(o), S, o.pushers);
  if (!made.ok()) return made.status();
  const FlatLayout layout = *std::move(made);
  const uint64_t n = layout.total_elems();
  ShardLoadReport report;
  report.total_elems = n;
  report.state_bytes = 14 * n;

  // The reference, first: one process, optim/'s scalar AdamW.
  OptimizerConfig config;
  config.lr = 1e-2;
  config.weight_decay = 0.1;
  std::vector<float> master(n), m(n, 0.f), v(n, 0.f), grad(n);
  std::vector<uint16_t> mirror(n);
  FillInitialValues(layout, o.seed, 0.02, {0, n}, master.data());
  uint64_t t = 0;
  for (uint32_t s = 0; s < o.steps; ++s) {
    const StepKind kind = KindOf(s);
    if (kind.skip) continue;
    for (const UnitInfo& unit : layout.units()) {
      for (uint64_t i = unit.offset; i < unit.offset + unit.padded; ++i) {
        grad[i] = GradAt(unit, i, o.seed, s, kind.bf16);
      }
    }
    AdamUpdateReference(
        MakeAdamStep(config, ++t, static_cast<float>(kind.coefficient)),
        GradView::Fp32(grad.data()),
        {master.data(), m.data(), v.data(), mirror.data(), n});
  }
  grad = {};
  m = {};
  v = {};

  // The servers.
  std::vector<std::unique_ptr<Subprocess>> servers;
  std::vector<std::string> addresses;
  for (int k = 0; k < S; ++k) {
    const std::string port_file =
        absl::StrCat(o.work_dir, "/port.", k);
    std::filesystem::remove(port_file);
    SubprocessOptions so;
    so.argv = {o.server_binary, "--listen=127.0.0.1:0",
               absl::StrCat("--server_index=", k),
               absl::StrCat("--num_servers=", S), "--port_file=" + port_file};
    so.argv.push_back(o.credentials_dir.empty()
                          ? std::string("--no_auth")
                          : "--credentials=" + o.credentials_dir);
    so.stdout_mode = SubprocessOptions::Output::kDiscard;
    so.stderr_mode = SubprocessOptions::Output::kFile;
    so.stderr_path = absl::StrCat(o.work_dir, "/server.", k, ".log");
    auto p = Subprocess::Start(so);
    if (!p.ok()) return p.status();
    auto port = WaitForPortFile(port_file, absl::Seconds(60), p->get());
    if (!port.ok()) return port.status();
    servers.push_back(*std::move(p));
    addresses.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  auto stop_servers = [&] {
    for (auto& p : servers) p->Stop(absl::Seconds(10));
  };

  ShardClientOptions base;
  base.run_id = kRunId;
  base.call_timeout = o.call_timeout;
  base.control_timeout = o.call_timeout;
  auto worker_security = Security(o.credentials_dir, Role::kWorker);
  auto ctl_security = Security(o.credentials_dir, Role::kCtl);
  auto admin_security = Security(o.credentials_dir, Role::kAdmin);
  for (const auto* s : {&worker_security, &ctl_security, &admin_security}) {
    if (!s->ok()) return s->status();
  }
  ShardClientOptions admin_options = base;
  admin_options.security = *admin_security;
  auto admin = ShardClient::Create(addresses, layout, admin_options);
  if (!admin.ok()) return admin.status();
  InitOptions init;
  init.optimizer = config;
  init.param_groups = ParamGroups::Single();  // as the reference above
  init.seed = o.seed;
  init.num_workers = o.pushers;
  if (auto r = (*admin)->Init(init); !r.ok()) return r.status();
  for (int k = 0; k < S; ++k) {
    report.server_rss_after_init_bytes.push_back(
        ProcStatusBytes(servers[k]->pid(), "VmRSS"));
  }

  // The clients: every one has its own channels (connections).
  const uint32_t clients = o.pushers + o.readers + o.inspectors;
  std::vector<ThreadLog> logs(clients);
  std::atomic<uint32_t> pushers_left{o.pushers};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (uint32_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      ThreadLog& log = logs[c];
      ShardClientOptions opt = base;
      const bool inspector = c >= o.pushers + o.readers;
      opt.security = inspector ? *ctl_security : *worker_security;
      auto client = ShardClient::Create(addresses, layout, opt);
      if (!client.ok()) {
        ++log.errors;
        log.messages.push_back(client.status().ToString());
        if (c < o.pushers) --pushers_left;
        return;
      }
      while (!go.load()) std::this_thread::yield();
      const FlatRange all{0, n};
      if (c < o.pushers) {
        // A worker: gather everything at the step's version, push its part.
        const uint32_t r = c;
        std::vector<uint16_t> params(n);
        std::vector<float> fp32;
        std::vector<uint16_t> bf16;
        for (uint32_t s = 0; s < o.steps; ++s) {
          (void)log.Timed(kGather, [&] {
            return (*client)->Gather({&all, 1}, DType::kBf16, s,
                                     params.data(), 2 * n);
          });
          const StepKind kind = KindOf(s);
          std::vector<GradSpan> spans;
          fp32.clear();
          bf16.clear();
          std::vector<FlatRange> parts = layout.WorkerRanges(r);
          uint64_t total = 0;
          for (const FlatRange& p : parts) total += p.size();
          fp32.reserve(total);
          bf16.reserve(total);
          for (size_t u = 0; u < parts.size(); ++u) {
            const UnitInfo& unit = layout.units()[u];
            const size_t at = kind.bf16 ? bf16.size() : fp32.size();
            for (uint64_t i = parts[u].begin; i < parts[u].end; ++i) {
              const float g = GradAt(unit, i, o.seed, s, false);
              if (kind.bf16) bf16.push_back(FloatToBf16(g));
              else fp32.push_back(g);
            }
            spans.push_back({parts[u], kind.bf16 ? DType::kBf16 : DType::kFp32,
                             kind.bf16 ? static_cast<const void*>(&bf16[at])
                                       : static_cast<const void*>(&fp32[at])});
          }
          auto pushed = log.Timed(kPush, [&] {
            return (*client)->PushGrad(s, r, spans,
                                       {kind.coefficient, kind.skip},
                                       kind.known);
          });
          if (pushed.ok()) log.duplicates += pushed->duplicate_elems;
        }
        --pushers_left;
      } else if (!inspector) {
        // A reader: every version in FP32, the last one checked.
        std::vector<float> params(n);
        for (uint32_t s = 0; s <= o.steps; ++s) {
          auto g = log.Timed(kGather, [&] {
            return (*client)->Gather({&all, 1}, DType::kFp32, s,
                                     params.data(), 4 * n);
          });
          if (g.ok() && s == o.steps) {
            log.mismatched += CountMismatches(params.data(), master.data(), n);
          }
        }
      } else {
        // An inspector: Inspect each server in turn until the workers end.
        for (int k = 0; pushers_left.load() > 0; k = (k + 1) % S) {
          (void)log.Timed(kInspect, [&] { return (*client)->channels().Inspect(k); });
          absl::SleepFor(o.inspect_interval);
        }
      }
    });
  }
  const absl::Time t0 = absl::Now();
  go = true;
  for (std::thread& th : threads) th.join();
  report.wall = absl::Now() - t0;

  // The final state, as the admin sees it.
  std::vector<float> final_weights(n);
  const FlatRange all{0, n};
  auto g = (*admin)->Gather({&all, 1}, DType::kFp32, o.steps,
                            final_weights.data(), 4 * n);
  ThreadLog end_log;
  if (!g.ok()) {
    ++end_log.errors;
    end_log.messages.push_back("final gather: " + g.status().ToString());
  } else {
    end_log.mismatched += CountMismatches(final_weights.data(), master.data(), n);
  }
  report.versions_ok = report.adam_step_ok = true;
  for (int k = 0; k < S; ++k) {
    auto info = (*admin)->channels().Inspect(k);
    if (!info.ok()) {
      ++end_log.errors;
      end_log.messages.push_back("final inspect: " + info.status().ToString());
      report.versions_ok = report.adam_step_ok = false;
      continue;
    }
    report.versions_ok &= info->min_version() == o.steps &&
                          info->max_version() == o.steps;
    report.adam_step_ok &= info->adam_step() == t;
    report.pending_grad_bytes_left += info->pending_grad_bytes();
    for (const auto& [code, count] : info->counters().errors()) {
      report.server_errors += count;
    }
    report.server_owned_elems.push_back(info->owned_end() -
                                        info->owned_begin());
    report.server_pending_limit_bytes.push_back(
        info->pending_grad_limit_bytes());
    report.server_peak_rss_bytes.push_back(
        ProcStatusBytes(servers[k]->pid(), "VmHWM"));
  }
  stop_servers();

  std::vector<double> us[kNumKinds];
  logs.push_back(std::move(end_log));
  for (ThreadLog& log : logs) {
    report.calls += log.calls;
    report.errors += log.errors;
    report.mismatched_elems += log.mismatched;
    report.duplicate_elems += log.duplicates;
    for (std::string& msg : log.messages) {
      if (report.error_samples.size() < 8) {
        report.error_samples.push_back(std::move(msg));
      }
    }
    for (int k = 0; k < kNumKinds; ++k) {
      us[k].insert(us[k].end(), log.us[k].begin(), log.us[k].end());
    }
  }
  for (int k = 0; k < kNumKinds; ++k) {
    CallLatency c;
    c.name = kKindNames[k];
    c.count = us[k].size();
    c.p50_us = Percentile(us[k], 0.5);
    c.p99_us = Percentile(us[k], 0.99);
    c.max_us = us[k].empty() ? 0 : *std::max_element(us[k].begin(), us[k].end());
    report.latencies.push_back(c);
  }
  return report;
}

std::string FormatShardLoadReport(const ShardLoadReport& r) {
  std::string out = absl::StrFormat(
      "  %-9s %8s %11s %11s %11s\n", "call", "count", "p50 ms", "p99 ms",
      "max ms");
  for (const CallLatency& c : r.latencies) {
    absl::StrAppendFormat(&out, "  %-9s %8d %11.2f %11.2f %11.2f\n", c.name,
                          c.count, c.p50_us / 1e3, c.p99_us / 1e3,
                          c.max_us / 1e3);
  }
  for (size_t k = 0; k < r.server_peak_rss_bytes.size(); ++k) {
    absl::StrAppendFormat(
        &out,
        "  server %d: peak RSS (VmHWM) %.1f MiB; after Init %.1f MiB; state "
        "%.1f MiB (14 B x %d owned elements); pending-gradient cap %.1f MiB\n",
        k, r.server_peak_rss_bytes[k] / 1048576.0,
        r.server_rss_after_init_bytes[k] / 1048576.0,
        14.0 * r.server_owned_elems[k] / 1048576.0, r.server_owned_elems[k],
        r.server_pending_limit_bytes[k] / 1048576.0);
  }
  absl::StrAppendFormat(
      &out,
      "  %d calls in %.2f s, %d errors, %d elements differ from the "
      "reference, %d duplicate elements, server error counters %d\n",
      r.calls, absl::ToDoubleSeconds(r.wall), r.errors, r.mismatched_elems,
      r.duplicate_elems, r.server_errors);
  for (const std::string& e : r.error_samples) out += "  error: " + e + "\n";
  return out;
}

}  // namespace zeroshard::testing
