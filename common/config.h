// The training configuration: a DeepSpeed-style JSON file plus a `zeroshard`
// section for what is ours (cluster, model shape, data, outputs, TLS).
//
//   ASSIGN_OR_RETURN(ParsedConfig parsed,
//                    LoadTrainingConfig("examples/gpt-small.json",
//                                       {.workers = 2}));
//   for (const std::string& w : parsed.warnings) ZS_LOG(WARNING) << w;
//   const TrainingConfig& c = parsed.config;
//   // c.micro_batch_size * c.gradient_accumulation_steps * c.cluster.workers
//   //   == c.train_batch_size, always, after a successful parse.
//
// Contracts:
// - Parsing is strict about values and lenient about keys: keys we do not
//   know and DeepSpeed keys that have no effect here (overlap_comm, bucket
//   sizes, offload_*, monitoring sections, ...) are named by full path
//   ("zero_optimization.foo") in ONE warning in ParsedConfig::warnings; a
//   known key with a wrong type, an out-of-range
//   value or an unknown enum spelling is INVALID_ARGUMENT naming the key path
//   and what was expected. Enum spellings are case-insensitive.
// - "auto" is accepted where DeepSpeed / Hugging Face accept it and is
//   resolved from the rest of the file (see each field). A parsed config is
//   fully resolved: no field holds "auto".
// - Batch sizes follow DeepSpeed's rule train_batch_size =
//   train_micro_batch_size_per_gpu * gradient_accumulation_steps *
//   world_size, world_size = cluster.workers (after overrides). Given two of
//   the three the third is derived (it must divide exactly); given only
//   train_batch_size, gas = 1; given only the micro batch, gas = 1; an
//   inconsistent triple is an error naming the three keys and world_size.
//   Neither train_batch_size nor the micro batch given (all "auto", as
//   Hugging Face's DeepSpeed configs write them): micro batch 8 (Hugging
//   Face Trainer's default), gas as given or 1, and a warning says so.
// - zero_optimization.stage 1, 2, 3 are supported (default 3 when absent);
//   stage 0 is an error (zeroshard always partitions optimizer state).
// - Both bf16.enabled and fp16.enabled → error; neither → fp32. An
//   "enabled": "auto" reads as false (there is no launcher flag to decide it).
//   "bfloat16" is accepted as an alias of "bf16", as in DeepSpeed.
// - scheduler: WarmupCosineLR, WarmupLR and WarmupDecayLR map onto
//   LrScheduleKind with their warmup_type ("log", DeepSpeed's default when
//   absent, or "linear") and warmup start (warmup_min_lr, or lr *
//   warmup_min_ratio); WarmupLR becomes warmup-cosine with min_lr = lr
//   (i.e. constant after warmup), WarmupDecayLR kWarmupLinear (down to
//   warmup_min_lr at total_num_steps). warmup_min_lr above the peak lr and
//   other types are errors saying so. A warmup longer than the run (total
//   "auto", e.g. --steps=20 under a 30-step warmup) is shortened to a tenth
//   of the run with a warning; one longer than a total_num_steps the file
//   states is an error naming both keys.
// - optimizer.type "Adam" follows DeepSpeed: params.adam_w_mode (default
//   true) selects decoupled weight decay (kAdamW); adam_w_mode false gives
//   Adam with L2 decay (kAdam). "AdamW" is always kAdamW. Default
//   weight_decay: 0.01 for kAdamW, 0 for kAdam (torch's defaults).
// - zeroshard.param_groups (common/param_groups.h): weight_decay and lr_scale
//   per tensor class; default Hugging Face's (no decay on biases and norms),
//   "single" for torch's one group.
#ifndef ZEROSHARD_COMMON_CONFIG_H_
#define ZEROSHARD_COMMON_CONFIG_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config_enums.h"
#include "common/model_shape.h"
#include "common/optimizer_config.h"
#include "common/param_groups.h"

namespace zeroshard {

// DeepSpeed's `fp16` section (used when precision == kFp16).
struct Fp16Config {
  // 0 = dynamic loss scaling; > 0 = this static scale.
  double loss_scale = 0;
  int initial_scale_power = 16;   // dynamic: initial scale 2^power, [0, 64]
  int loss_scale_window = 1000;   // clean steps before the scale doubles, >= 1
  int hysteresis = 2;             // overflows tolerated before a backoff, >= 1
  double min_loss_scale = 1;      // > 0
  bool consecutive_hysteresis = false;  // see common/loss_scaler.h
};

// DeepSpeed's `zero_optimization` section. Only `stage` changes zeroshard's
// schedule today; the bucket sizes are accepted and recorded (elements).
struct ZeroConfig {
  int stage = 3;                                      // 1, 2 or 3
  OffloadDevice offload_optimizer = OffloadDevice::kCpu;  // "cpu" | "none"
  bool offload_pin_memory = false;
  bool overlap_comm = true;
  bool contiguous_gradients = true;
  uint64_t allgather_bucket_size = 500000000;
  uint64_t reduce_bucket_size = 500000000;
  uint64_t stage3_prefetch_bucket_size = 50000000;
  uint64_t stage3_param_persistence_threshold = 100000;
  uint64_t stage3_max_live_parameters = 1000000000;
  uint64_t stage3_max_reuse_distance = 1000000000;
};

// DeepSpeed's `activation_checkpointing` keys (accepted, recorded) and our
// policy from `zeroshard.activation_checkpointing`.
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  int number_checkpoints = 0;  // 0 = not set
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  CheckpointPolicy policy = CheckpointPolicy::kNone;
  int k = 1;  // kEveryK: checkpoint blocks 0, k, 2k, ...; >= 1
};

// `zeroshard.data`: the corpus, how it is split, and the validation loss.
struct DataConfig {
  // Training files (paths or glob patterns, each expanded in sorted order),
  // in this order: text files concatenated ("paths", format bytes) or token
  // files ("train"); empty = the built-in corpus (Debian's license texts,
  // see data/corpus.h).
  std::vector<std::string> paths;
  // The key the file gave them under, for messages ("zeroshard.data.train"
  // or "zeroshard.data.paths"; not part of the resolved configuration).
  std::string paths_key = "zeroshard.data.paths";
  // Held-out files (paths or globs, "validation"); empty: the last
  // validation_fraction of the training tokens is held out instead.
  std::vector<std::string> validation_paths;
  // Absent: bytes for "paths", auto for "train".
  DataFormat format = DataFormat::kBytes;
  uint64_t seed = 0;                 // default ("auto"/absent): zeroshard.seed
  double validation_fraction = 0.05; // last fraction of tokens, [0, 0.5]
  // Validation loss every K steps (absent or "auto": about ten times a run,
  // steps_per_print * round(steps / (10 * steps_per_print)), at least
  // steps_per_print; 0: only after the last step) over eval_batches
  // micro-batches per worker (0: never).
  uint64_t eval_every_steps = 10;
  int eval_batches = 4;
};

// Everything under `zeroshard`.
// zeroshard.checkpoint: coordinated checkpoints of the servers' state
// (docs/DESIGN.md, "Checkpoints").
struct CheckpointConfig {
  std::string dir;          // every server (and worker 0) reaches it; empty:
                            // no checkpoints
  uint64_t every_steps = 0; // also every K steps; 0: only at the end
  int keep_last = 2;        // complete checkpoints kept; 0: all
};

// zeroshard.sample: the text zeroshard-train generates from the trained
// model before it stops the servers (model/sample_text.h,
// model/generate.h). An empty prompt means SampleText's default.
struct SampleConfig {
  bool enabled = true;
  std::string prompt;        // text, or "ids:ID,ID,..."
  int max_new_tokens = 48;   // >= 0
  double temperature = 0.8;  // >= 0; 0: greedy
  int top_k = 40;            // >= 0; 0: the whole vocabulary
  uint64_t seed = 1;
  std::string vocab, merges; // a GPT-2 vocabulary (both or neither)
};

struct ClusterConfig {
  int servers = 1;                            // S, >= 1
  std::vector<std::string> server_addresses;  // "host:port"; empty = local
  int workers = 1;                            // N = world_size, >= 1
  // Copies of each server's slot (docs/DESIGN.md, "Replicas"): 1, or 2 with
  // S >= 2 (slot k also on server k + 1 mod S, so a dead server costs no
  // step).
  int replicas = 1;                           // zeroshard.replicas
  // With replicas: the copies are compared (their state digests) at every
  // step that is a multiple of this, while it computes; 0: only where
  // checkpoints fall and after the last step.
  uint64_t replica_check_every_steps = 10;    // zeroshard.replica_check_every_steps
  Placement placement = Placement::kHost;
  ModelShape model;                           // validated by ValidateModelShape
  DataConfig data;
  uint64_t steps = 100;                       // optimizer steps, >= 1
  uint64_t seed = 42;                         // init weights (and data default)
  double init_std = 0.02;                     // > 0
  uint64_t chunk_elems = 0;                   // 0 = server default; % 64 == 0
  std::string metrics_path = "metrics.csv";  // empty = no metrics file
  MetricsFormat metrics_format = MetricsFormat::kCsv;
  std::string plot_path = "loss.svg";         // empty = no picture
  CheckpointConfig checkpoint;                // zeroshard.checkpoint
  SampleConfig sample;                        // zeroshard.sample
  // Credentials directory (wire/credentials.h); empty: the launcher makes
  // per-run tokens for its local cluster.
  std::string credentials;
  double step_timeout_s = 300;                // timeouts.step_seconds, > 0
  double startup_timeout_s = 60;              // timeouts.startup_seconds, > 0
  // Gather and push through shared memory with servers on the same host
  // (docs/DESIGN.md, "Shared memory on one host"); servers elsewhere are
  // reached over gRPC either way.
  bool shared_memory = true;                  // zeroshard.shared_memory
  // FP16: consecutive overflowing steps with the scale at min_loss_scale
  // before training stops with FAILED_PRECONDITION; >= 1.
  int max_overflows_at_min_scale = 10;
};

// A fully resolved configuration.
struct TrainingConfig {
  int train_batch_size = 0;             // samples per optimizer step, all workers
  int micro_batch_size = 0;             // train_micro_batch_size_per_gpu
  int gradient_accumulation_steps = 0;  // micro-steps per optimizer step
  double gradient_clipping = 0;         // max global L2 norm; 0 = off
  Precision precision = Precision::kFp32;
  CommDataType communication_data_type = CommDataType::kFp32;
  Fp16Config fp16;
  OptimizerConfig optimizer;            // includes the LR schedule
  ParamGroups param_groups;             // zeroshard.param_groups (HF default)
  ZeroConfig zero;
  ActivationCheckpointingConfig activation_checkpointing;
  int steps_per_print = 10;
  bool wall_clock_breakdown = false;
  ClusterConfig cluster;
};

// Values from the command line that replace the file's (applied before "auto"
// resolution, so e.g. a --steps override also moves an "auto"
// scheduler.params.total_num_steps).
// The ranges zeroshard.servers / workers / steps (and the launcher's
// --servers / --workers / --steps) accept.
inline constexpr int kMaxClusterProcesses = 4096;
inline constexpr int64_t kMaxTrainSteps = std::numeric_limits<int64_t>::max();

struct ConfigOverrides {
  std::optional<int> servers;
  std::optional<int> workers;
  std::optional<uint64_t> steps;
};

struct ParsedConfig {
  TrainingConfig config;
  // Defaults chosen for "auto", shortened warmups, and one warning naming
  // every key without effect (unknown ones included).
  std::vector<std::string> warnings;
  // Keys given that only the PyTorch front-end acts on (its ZeRO-3's
  // stage3_prefetch_bucket_size, stage3_max_reuse_distance,
  // stage3_max_live_parameters and stage3_param_persistence_threshold),
  // quoted: zeroshard-train warns.
  std::vector<std::string> front_end_only;
};

// Parses and resolves a JSON document (comments are allowed).
absl::StatusOr<ParsedConfig> ParseTrainingConfig(
    std::string_view json_text, const ConfigOverrides& overrides = {});

// Reads `path` and parses it; NOT_FOUND when the file cannot be read.
// Error messages and warnings are prefixed with the path.
absl::StatusOr<ParsedConfig> LoadTrainingConfig(
    const std::string& path, const ConfigOverrides& overrides = {});

// DeepSpeed's batch rule (see the contracts above); nullopt = absent or
// "auto". Writes the three resolved sizes into `config`.
absl::Status ResolveBatchSizes(std::optional<int> train_batch_size,
                               std::optional<int> micro_batch_size,
                               std::optional<int> gradient_accumulation_steps,
                               int world_size, TrainingConfig* config);

// Cross-field checks on a resolved config (ParseTrainingConfig runs them;
// call again after editing a config in code).
absl::Status ValidateTrainingConfig(const TrainingConfig& config);

// A canonical JSON rendering (sorted keys, resolved values, no whitespace) of
// every field that changes what is trained: batch sizes, precision and loss
// scaling, optimizer and schedule, ZeRO stage, checkpointing policy, model,
// data paths/seed/split, steps, seed, init_std, chunk_elems, server and worker
// counts (the fp16 section only under fp16). Host-local fields (addresses,
// TLS files, metrics/plot/checkpoint paths, timeouts) and DeepSpeed keys
// recorded without effect are left out, so workers on different hosts can
// compare it. It is the resolved config's field list (common/resolved_config.cc,
// VisitConfig: the one list of fields) less those, nested and named as the
// resolved config is, and defined there.
std::string CanonicalJson(const TrainingConfig& config);

// 64-bit FNV-1a of CanonicalJson(config): a cheap agreement check.
uint64_t ConfigFingerprint(const TrainingConfig& config);

// Lower-case names used in the JSON and in messages.

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CONFIG_H_
