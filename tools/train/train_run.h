// One zeroshard-train run, start to summary: loads the config, starts the
// local cluster (tools/train/train_cluster.h), follows rank 0's progress
// feed (progress bar, metrics file), then optionally exports the final FP32
// weights, prints a text sample from the trained model
// (tools/train/run_sample.h), stops the cluster, draws the loss curve and
// prints the summary.
//
//   TrainOptions o;
//   o.config_path = "examples/gpt-small.json";
//   o.out_dir = "out/main";
//   absl::StatusOr<RunSummary> s = RunTraining(o, &interrupted);
//
// Contracts:
// - Relative metrics and plot paths from the config resolve inside out_dir;
//   absolute ones are used as they are. An empty metrics/plot path in the
//   config means no such file.
// - The plot extension (.svg / .png) is checked before anything starts.
// - Any process failure, a hang (no progress line within
//   zeroshard.timeouts.step_seconds; the first line may take
//   startup_seconds more) or an interruption stops every child (SIGTERM,
//   then SIGKILL after a grace period) and returns an error naming the
//   process. The metrics of the steps made so far stay on disk.
// - With server addresses (the option or zeroshard.servers as a list), no
//   server is started; the run trains on those servers.
#ifndef ZEROSHARD_TOOLS_TRAIN_TRAIN_RUN_H_
#define ZEROSHARD_TOOLS_TRAIN_TRAIN_RUN_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/train/run_summary.h"

namespace zeroshard {

struct TrainOptions {
  std::string config_path;
  std::optional<int> servers;
  std::optional<int> workers;
  std::optional<uint64_t> steps;
  std::vector<std::string> server_addresses;  // overrides the config's
  std::string out_dir = "zeroshard-out";
  std::string bin_dir;                        // zeroshard-server/-worker
  bool save_weights = false;
  int64_t inject_overflow_at_step = -1;
  int64_t inject_partial_apply_at_step = -1;  // testing
  // A Hugging Face GPT-2 .safetensors file of starting weights (workers'
  // --init_from), checked against the layout before anything starts.
  std::string init_from;
  // --save_weights also writes weights.safetensors (HF GPT-2 tensors).
  bool save_safetensors = false;
  // A checkpoint directory to continue from (its newest complete
  // checkpoint), with any --servers / --workers.
  std::string resume_dir;
  // Crash recovery: how many times a failed process may be replaced. A
  // dead worker (servers alive at a clean step) restarts the workers only,
  // redoing the step; a dead server restarts everything from the newest
  // checkpoint of zeroshard.checkpoint.dir.
  int max_restarts = 0;
  // The closing text sample (tools/train/run_sample.h); false skips it,
  // as zeroshard.sample.enabled: false does.
  bool sample = true;
  bool quiet = false;                         // no progress bar
  std::FILE* progress = stderr;               // bar and summary
};

absl::StatusOr<RunSummary> RunTraining(const TrainOptions& options,
                                       const std::atomic<bool>* interrupted);

// The directory holding the running executable (/proc/self/exe).
absl::StatusOr<std::string> ExecutableDir();

}  // namespace zeroshard

#endif  // ZEROSHARD_TOOLS_TRAIN_TRAIN_RUN_H_
