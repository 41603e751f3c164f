// zeroshard-train: trains a GPT on a whole local zeroshard cluster (S shard
// servers and N workers as processes on 127.0.0.1), or on given servers.
//
//   zeroshard-train --config=examples/gpt-small.json [--servers=S]
//       [--workers=N] [--steps=K] [--out=DIR] [--save_weights [--format=F]]
//       [--init_from=MODEL.safetensors]
//       [--server_addresses=h:p,...] [--inject_overflow_at_step=K] [--quiet]
//       [--sample=false]
//
// Exit codes: 0 trained; 1 failed (the message names the process); 2 bad
// usage or config; 130 interrupted (Ctrl-C / SIGTERM; children stopped).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "client/client_options.h"
#include "common/command_line.h"
#include "common/config.h"
#include "tools/train/train_run.h"

ABSL_FLAG(std::string, config, "", "DeepSpeed-style JSON config file");
ABSL_FLAG(std::optional<int>, servers, std::nullopt,
          "shard servers S, at least 1 (unset: the config's)");
ABSL_FLAG(std::optional<int>, workers, std::nullopt,
          "workers N, at least 1 (unset: the config's)");
ABSL_FLAG(std::optional<int64_t>, steps, std::nullopt,
          "train until this step, at least 1 (unset: the config's)");
ABSL_FLAG(std::string, out, "zeroshard-out",
          "output directory: metrics, loss curve, logs, weights");
ABSL_FLAG(bool, save_weights, false,
          "write the final FP32 weights to OUT/weights.f32 + weights.json");
ABSL_FLAG(std::string, format, "f32",
          "--save_weights format: f32 (weights.f32 + weights.json) or "
          "safetensors (also OUT/weights.safetensors, Hugging Face GPT-2 "
          "names)");
ABSL_FLAG(std::string, init_from, "",
          "start from the weights of a Hugging Face GPT-2 .safetensors file "
          "(servers at step 0 only)");
ABSL_FLAG(std::string, server_addresses, "",
          "HOST:PORT,... of running servers: start none, train on these");
ABSL_FLAG(int64_t, inject_overflow_at_step, -1,
          "testing: make the gradient non-finite at this step");
ABSL_FLAG(int64_t, inject_partial_apply_at_step, -1,
          "testing: worker rank 0 applies this step on server 0 only, then "
          "fails (first attempt only)");
ABSL_FLAG(bool, quiet, false, "no progress bar (the summary still prints)");
ABSL_FLAG(bool, sample, true,
          "print a text sample from the trained model at the end "
          "(zeroshard.sample sets its prompt; --sample=false skips it)");
ABSL_FLAG(std::string, resume, "",
          "continue from the newest complete checkpoint in this directory, "
          "or from DIR/step-N, that checkpoint (any --servers / --workers)");
ABSL_FLAG(int, max_restarts, 0,
          "replace failed processes up to this many times (a dead worker: "
          "new workers redo the step; a dead server: all restart from the "
          "newest checkpoint)");

namespace {

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

// A count flag, when given, must lie in [lo, hi]: a message naming it
// otherwise (so --steps=0 or --servers=-1 never falls back to the config's).
template <typename T>
bool InRange(const char* flag, const std::optional<T>& v, int64_t lo,
             int64_t hi, const char* what) {
  if (!v.has_value()) return true;
  if (static_cast<int64_t>(*v) >= lo && static_cast<int64_t>(*v) <= hi) {
    return true;
  }
  std::fprintf(stderr,
               "zeroshard-train: --%s=%lld: want %s, from %lld to %lld "
               "(leave it out for the config's)\n",
               flag, static_cast<long long>(*v), what,
               static_cast<long long>(lo), static_cast<long long>(hi));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const zeroshard::CommandLine cl = zeroshard::ParseProgramFlags(
      argc, argv, "zeroshard-train",
      "zeroshard-train --config=FILE [--servers=S] [--workers=N] [--steps=K] "
      "[--out=DIR] [--resume=DIR[/step-N]] [--max_restarts=R] "
      "[--save_weights [--format=f32|safetensors]] "
      "[--init_from=MODEL.safetensors] [--server_addresses=H:P,...] [--quiet] "
      "[--sample=false]");
  if (cl.exit_code.has_value()) return *cl.exit_code;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  zeroshard::TrainOptions o;
  o.config_path = absl::GetFlag(FLAGS_config);
  const std::optional<int> servers = absl::GetFlag(FLAGS_servers);
  const std::optional<int> workers = absl::GetFlag(FLAGS_workers);
  const std::optional<int64_t> steps = absl::GetFlag(FLAGS_steps);
  if (!InRange("servers", servers, 1, zeroshard::kMaxClusterProcesses,
               "a server count") ||
      !InRange("workers", workers, 1, zeroshard::kMaxClusterProcesses,
               "a worker count") ||
      !InRange("steps", steps, 1, zeroshard::kMaxTrainSteps, "a step count") ||
      !InRange<int>("max_restarts", absl::GetFlag(FLAGS_max_restarts), 0,
                    1000, "a restart count") ||
      !InRange<int64_t>("inject_overflow_at_step",
                        absl::GetFlag(FLAGS_inject_overflow_at_step), -1,
                        zeroshard::kMaxTrainSteps, "a step or -1") ||
      !InRange<int64_t>("inject_partial_apply_at_step",
                        absl::GetFlag(FLAGS_inject_partial_apply_at_step), -1,
                        zeroshard::kMaxTrainSteps, "a step or -1")) {
    return 2;
  }
  o.servers = servers;
  o.workers = workers;
  if (steps.has_value()) o.steps = static_cast<uint64_t>(*steps);
  if (!absl::GetFlag(FLAGS_server_addresses).empty()) {
    auto list = zeroshard::ParseServerList(absl::GetFlag(FLAGS_server_addresses));
    if (!list.ok()) {
      std::fprintf(stderr, "zeroshard-train: --server_addresses: %s\n",
                   std::string(list.status().message()).c_str());
      return 2;
    }
    o.server_addresses = *list;
  }
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.save_weights = absl::GetFlag(FLAGS_save_weights);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "f32" && format != "safetensors") {
    std::fprintf(stderr,
                 "zeroshard-train: --format=%s: want f32 or safetensors\n",
                 format.c_str());
    return 2;
  }
  o.save_safetensors = format == "safetensors";
  if (cl.Given("format") && !o.save_weights) {
    std::fprintf(stderr,
                 "zeroshard-train: --format=%s chooses the format of "
                 "--save_weights, which is not given\n",
                 format.c_str());
    return 2;
  }
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.inject_overflow_at_step = absl::GetFlag(FLAGS_inject_overflow_at_step);
  o.quiet = absl::GetFlag(FLAGS_quiet);
  o.sample = absl::GetFlag(FLAGS_sample);
  o.inject_partial_apply_at_step =
      absl::GetFlag(FLAGS_inject_partial_apply_at_step);
  o.resume_dir = absl::GetFlag(FLAGS_resume);
  o.max_restarts = absl::GetFlag(FLAGS_max_restarts);

  absl::StatusOr<zeroshard::RunSummary> s =
      zeroshard::RunTraining(o, &g_interrupted);
  if (s.ok()) return 0;
  if (g_interrupted.load()) {
    std::fprintf(stderr, "zeroshard-train: interrupted; all processes stopped\n");
    return 130;
  }
  std::fprintf(stderr, "zeroshard-train: FAILED: %s\n",
               s.status().ToString().c_str());
  const bool usage = absl::IsInvalidArgument(s.status()) ||
                     absl::IsNotFound(s.status());
  return usage ? 2 : 1;
}
