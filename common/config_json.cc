// ParseTrainingConfig: walks the JSON document section by section. Each
// section reader records the keys it consumed; whatever is left becomes a
// warning naming its full path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "common/config_optimizer.h"
#include "common/config_section.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

using config_internal::IsAuto;
using config_internal::Section;
using config_internal::Shown;
using nlohmann::json;

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

// The micro batch when neither train_batch_size nor
// train_micro_batch_size_per_gpu is a number: Hugging Face Trainer's
// per_device_train_batch_size default, what its "auto" would fill in.
constexpr int64_t kDefaultMicroBatch = 8;

// DeepSpeed's top-level sections and flags that have no counterpart here
// (monitoring, profiling, NVMe I/O, pipeline, compression, ...): accepted
// whole and named in the "no effect" warning.
constexpr const char* kDeepSpeedOnlySections[] = {
    "tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler", "comms_logger", "aio",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "prescale_gradients",
    "gradient_predivide_factor", "sparse_gradients", "amp", "memory_breakdown", "dump_state",
    "elasticity", "autotuning", "data_efficiency", "compression_training", "checkpoint",
    "data_types", "pipeline", "curriculum_learning", "dataloader_drop_last", "eigenvalue",
    "progressive_layer_drop", "sparse_attention", "hybrid_engine", "torch_autocast", "compile",
    "nebula", "timers", "zero_quantized_weights", "zero_quantized_gradients",
    "managed_gradient_accumulation", "disable_allgather", "seq_parallel_communication_data_type",
    "tensor_parallel", "sequence_parallel_size", "data_parallel_size", "gradient_allreduce_op",
    "graph_harvesting", "log_level", "use_data_before_expert_parallelism", "weight_quantization",
    "expert_parallel"};
constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();

absl::Status ParsePrecision(Section& root, TrainingConfig* c) {
  bool bf16 = false, fp16 = false;
  for (const char* name : {"bf16", "bfloat16"}) {
    ASSIGN_OR_RETURN(Section s, root.Child(name));
    RETURN_IF_ERROR(s.Bool("enabled", &bf16, /*auto_value=*/bf16));
    // DeepSpeed 0.19's: the servers keep FP32 masters and FP32 state
    // whatever these say, and a BF16 step with a non-finite gradient is
    // always skipped.
    for (const char* k : {"immediate_grad_update", "check_grad_overflow",
                          "bf16_master_weights_and_grads", "bf16_optimizer_states"}) {
      s.NoEffect(k);
    }
    s.Finish();
  }
  ASSIGN_OR_RETURN(Section s, root.Child("fp16"));
  RETURN_IF_ERROR(s.Bool("enabled", &fp16, /*auto_value=*/false));
  Fp16Config& f = c->fp16;
  RETURN_IF_ERROR(s.Double("loss_scale", 0, 1e38, &f.loss_scale));
  RETURN_IF_ERROR(s.Int("initial_scale_power", 0, 64, &f.initial_scale_power));
  RETURN_IF_ERROR(s.Int("loss_scale_window", 1, kMaxInt, &f.loss_scale_window));
  RETURN_IF_ERROR(s.Int("hysteresis", 1, kMaxInt, &f.hysteresis));
  RETURN_IF_ERROR(s.Double("min_loss_scale", 1e-38, 1e38, &f.min_loss_scale));
  RETURN_IF_ERROR(s.Bool("consecutive_hysteresis", &f.consecutive_hysteresis));
  bool ignored = false;
  RETURN_IF_ERROR(s.Bool("auto_cast", &ignored));
  RETURN_IF_ERROR(s.Bool("fp16_master_weights_and_grads", &ignored));
  s.NoEffect("auto_cast");
  s.NoEffect("fp16_master_weights_and_grads");
  s.Finish();
  if (bf16 && fp16) {
    return absl::InvalidArgumentError(
        "config keys \"bf16.enabled\" and \"fp16.enabled\" are both true: choose one "
        "(neither means fp32)");
  }
  c->precision = bf16 ? Precision::kBf16 : fp16 ? Precision::kFp16 : Precision::kFp32;
  ASSIGN_OR_RETURN(const int comm,
                   root.Choice("communication_data_type", {"fp32", "bf16", "fp16"}));
  if (comm == 2) {
    return absl::InvalidArgumentError(
        "config key \"communication_data_type\" is \"fp16\": the shard servers take "
        "gradients as \"fp32\" or \"bf16\"");
  }
  c->communication_data_type = comm == 1 ? CommDataType::kBf16 : CommDataType::kFp32;
  return absl::OkStatus();
}

// A warmup longer than the run it belongs to: what a user's first short run
// (--steps=20 against a 30-step warmup) hits. Shortened to a tenth of the run
// (at least 1 step) with a warning instead of refused.
uint64_t FitWarmup(uint64_t warmup, uint64_t total, const char* why,
                   std::vector<std::string>* warnings) {
  if (warmup <= total) return warmup;
  const uint64_t fitted = std::max<uint64_t>(1, (total + 9) / 10);
  warnings->push_back(absl::StrCat(
      "config key \"scheduler.params.warmup_num_steps\" (", warmup, ") exceeds the run's ",
      total, " step", total == 1 ? "" : "s", why, ": warmup shortened to ", fitted, " step",
      fitted == 1 ? "" : "s", " (a tenth of the run)"));
  return fitted;
}

// Maps DeepSpeed's schedulers onto LrScheduleKind. Needs the optimizer lr and
// the resolved step count.
absl::Status ParseScheduler(Section& root, bool lr_explicit, uint64_t steps, OptimizerConfig* o,
                            std::vector<std::string>* warnings) {
  ASSIGN_OR_RETURN(Section s, root.Child("scheduler"));
  // Matched by name, never by place in the list.
  ASSIGN_OR_RETURN(const std::optional<std::string> type,
                   s.ChoiceName("type", {"WarmupCosineLR", "WarmupLR", "WarmupDecayLR",
                                         "OneCycle", "LRRangeTest"}));
  ASSIGN_OR_RETURN(Section p, s.Child("params"));
  s.Finish();
  if (!type.has_value()) {
    p.Finish();
    o->schedule = LrScheduleKind::kConstant;
    return absl::OkStatus();
  }
  if (*type == "OneCycle" || *type == "LRRangeTest") {
    return absl::InvalidArgumentError(
        "config key \"scheduler.type\": this type is not supported; use \"WarmupCosineLR\", "
        "\"WarmupLR\" or \"WarmupDecayLR\"");
  }
  // Absent: DeepSpeed's default 1000. "auto": Hugging Face Trainer's default
  // warmup_steps, 0.
  int64_t warmup = p.HoldsAuto("warmup_num_steps") ? 0 : 1000;
  RETURN_IF_ERROR(p.Int("warmup_num_steps", 0, kMaxI64, &warmup, true));
  // Absent: "log", DeepSpeed's default (its documented WarmupLR example
  // leaves it out).
  ASSIGN_OR_RETURN(const std::optional<std::string> warmup_type,
                   p.ChoiceName("warmup_type", {"log", "linear"}));
  o->warmup_type = warmup_type == "linear" ? WarmupType::kLinear : WarmupType::kLog;
  p.NoEffect("last_batch_iteration");
  // total_num_steps (WarmupCosineLR, WarmupDecayLR): absent or "auto" is the
  // run's step count; a warmup longer than that is shortened. A warmup longer
  // than a total the file states is a contradiction in the file.
  std::optional<int64_t> total;
  if (*type != "WarmupLR") {
    ASSIGN_OR_RETURN(total, p.IntOrAuto("total_num_steps", 1, kMaxI64, true));
    if (total.has_value() && warmup > *total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config keys \"scheduler.params.warmup_num_steps\" (", warmup,
          ") and \"scheduler.params.total_num_steps\" (", *total,
          ") disagree: the warmup must fit in the schedule"));
    }
  }
  const uint64_t total_steps = total.has_value() ? static_cast<uint64_t>(*total) : steps;
  if (*type == "WarmupCosineLR") {
    double min_ratio = 0, cos_min_ratio = 0.0001;
    RETURN_IF_ERROR(p.Double("warmup_min_ratio", 0, 1, &min_ratio));
    RETURN_IF_ERROR(p.Double("cos_min_ratio", 0, 1, &cos_min_ratio));
    p.Finish();
    o->warmup_start_lr = o->lr * min_ratio;
    o->schedule = LrScheduleKind::kWarmupCosine;
    o->total_steps = total_steps;
    o->warmup_steps = FitWarmup(static_cast<uint64_t>(warmup), total_steps,
                                " (total_num_steps \"auto\")", warnings);
    o->min_lr = o->lr * cos_min_ratio;
    return absl::OkStatus();
  }
  // WarmupLR (then constant) and WarmupDecayLR (then linear down to
  // warmup_min_lr): warmup from warmup_min_lr to warmup_max_lr (the
  // optimizer's lr).
  double min_lr = 0;
  RETURN_IF_ERROR(p.Double("warmup_min_lr", 0, 1e6, &min_lr, true));
  ASSIGN_OR_RETURN(std::optional<double> max_lr, p.DoubleOrAuto("warmup_max_lr", 1e-30, 1e6, true));
  p.Finish();
  if (max_lr.has_value()) {
    if (lr_explicit && *max_lr != o->lr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config keys \"scheduler.params.warmup_max_lr\" (", *max_lr,
          ") and \"optimizer.params.lr\" (", o->lr, ") disagree; give one or make them equal"));
    }
    o->lr = *max_lr;
  }
  if (min_lr > o->lr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"scheduler.params.warmup_min_lr\" (", min_lr,
        ") exceeds the peak lr (", o->lr, ", warmup_max_lr or optimizer.params.lr): the "
        "warmup must rise"));
  }
  if (*type == "WarmupDecayLR") {
    o->schedule = LrScheduleKind::kWarmupLinear;
    o->total_steps = total_steps;
    o->warmup_steps = FitWarmup(static_cast<uint64_t>(warmup), total_steps,
                                " (total_num_steps \"auto\")", warnings);
    o->min_lr = min_lr;
    o->warmup_start_lr = min_lr;
    return absl::OkStatus();
  }
  if (warmup == 0) {  // log: lr from step 1 on (log(2) / log(2)), as DeepSpeed
    o->schedule = LrScheduleKind::kConstant;
    o->warmup_type = WarmupType::kLinear;
    return absl::OkStatus();
  }
  o->schedule = LrScheduleKind::kWarmupCosine;  // cosine from lr to lr: constant
  o->warmup_steps = FitWarmup(static_cast<uint64_t>(warmup), steps, "", warnings);
  o->total_steps = steps;
  o->min_lr = o->lr;
  o->warmup_start_lr = min_lr;
  return absl::OkStatus();
}

absl::Status ParseZero(Section& root, ZeroConfig* z, std::vector<std::string>* front_end_only) {
  ASSIGN_OR_RETURN(Section s, root.Child("zero_optimization"));
  if (const json* stage = s.Get("stage"); stage != nullptr && stage->is_number() &&
                                          stage->get<double>() == 0) {
    return absl::InvalidArgumentError(
        "config key \"zero_optimization.stage\": 0 is not supported; zeroshard always "
        "partitions optimizer state across shard servers: use 1, 2 or 3");
  }
  RETURN_IF_ERROR(s.Int("stage", 1, 3, &z->stage));
  ASSIGN_OR_RETURN(Section off, s.Child("offload_optimizer"));
  ASSIGN_OR_RETURN(int device, off.Choice("device", {"none", "cpu", "nvme"}));
  if (device == 2) {
    return absl::InvalidArgumentError(
        "config key \"zero_optimization.offload_optimizer.device\": \"nvme\" is not "
        "supported; use \"cpu\" or \"none\"");
  }
  if (device >= 0) z->offload_optimizer = static_cast<OffloadDevice>(device);
  RETURN_IF_ERROR(off.Bool("pin_memory", &z->offload_pin_memory, false));
  for (const char* k : {"buffer_count", "fast_init", "ratio", "nvme_path", "buffer_size",
                        "max_in_cpu", "pipeline_read", "pipeline_write", "super_offload",
                        "cpuadam_cores_perc"}) {
    off.Accept(k);
  }
  off.Finish();
  // The optimizer state always lives in the shard servers' host memory.
  s.NoEffect("offload_optimizer");
  ASSIGN_OR_RETURN(Section param, s.Child("offload_param"));
  ASSIGN_OR_RETURN(int pdev, param.Choice("device", {"none", "cpu"}));
  (void)pdev;
  bool ignored = false;
  RETURN_IF_ERROR(param.Bool("pin_memory", &ignored, false));
  for (const char* k : {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path"}) param.Accept(k);
  param.Finish();
  s.NoEffect("offload_param");
  RETURN_IF_ERROR(s.Bool("overlap_comm", &z->overlap_comm, true));
  RETURN_IF_ERROR(s.Bool("contiguous_gradients", &z->contiguous_gradients, true));
  for (const char* k : {"allgather_partitions", "reduce_scatter", "round_robin_gradients",
                        "elastic_checkpoint", "ignore_unused_parameters", "load_from_fp32_weights",
                        "stage3_gather_16bit_weights_on_model_save",
                        "stage3_gather_fp16_weights_on_model_save", "cpu_offload"}) {
    RETURN_IF_ERROR(s.Bool(k, &ignored, false));
  }
  struct SizeKey {
    const char* key;
    uint64_t* out;
  };
  for (SizeKey k : {SizeKey{"allgather_bucket_size", &z->allgather_bucket_size},
                    SizeKey{"reduce_bucket_size", &z->reduce_bucket_size},
                    SizeKey{"stage3_prefetch_bucket_size", &z->stage3_prefetch_bucket_size},
                    SizeKey{"stage3_param_persistence_threshold",
                            &z->stage3_param_persistence_threshold},
                    SizeKey{"stage3_max_live_parameters", &z->stage3_max_live_parameters},
                    SizeKey{"stage3_max_reuse_distance", &z->stage3_max_reuse_distance}}) {
    RETURN_IF_ERROR(s.Int(k.key, 0, kMaxI64, k.out, true));
  }
  uint64_t sub_group = 0;
  RETURN_IF_ERROR(s.Int("sub_group_size", 0, kMaxI64, &sub_group, true));
  // What the PyTorch front-end's stage 3 keeps gathered (python/zeroshard/
  // stage3.py); the native trainer's units are fixed by its model.
  for (const char* k : {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                        "stage3_max_live_parameters", "stage3_max_reuse_distance"}) {
    if (s.Given(k)) front_end_only->push_back(absl::StrCat("\"", s.KeyPath(k), "\""));
  }
  // Recorded (zero.* in the resolved config) but nothing here reads them:
  // the schedule is fixed by the stage (docs/DESIGN.md).
  for (const char* k :
       {"overlap_comm", "contiguous_gradients", "allgather_partitions", "reduce_scatter",
        "round_robin_gradients", "elastic_checkpoint", "ignore_unused_parameters",
        "load_from_fp32_weights", "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save", "cpu_offload", "allgather_bucket_size",
        "reduce_bucket_size", "sub_group_size"}) {
    s.NoEffect(k);
  }
  // DeepSpeed 0.19's other ZeRO settings: its own partitioning, bucketing,
  // quantized communication (ZeRO++), MiCS and ZenFlow, none of which this
  // system's servers and step use (docs/PYTORCH.md).
  for (const char* k :
       {"use_multi_rank_bucket_allreduce", "zenflow", "cpu_offload_param",
        "cpu_offload_use_pin_memory", "stage3_model_persistence_threshold",
        "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
        "stage3_allgather_sequential", "legacy_stage1", "zero_hpz_partition_size",
        "zero_quantized_weights", "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
        "mics_hierarchical_params_gather", "memory_efficient_linear",
        "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
        "enable_sanity_checks", "save_muon_momentum_buffer_in_memory", "leaf_module"}) {
    s.NoEffect(k);
  }
  s.Finish();
  return absl::OkStatus();
}

absl::Status ParseActivationCheckpointing(Section& root, ActivationCheckpointingConfig* a) {
  ASSIGN_OR_RETURN(Section s, root.Child("activation_checkpointing"));
  RETURN_IF_ERROR(s.Bool("partition_activations", &a->partition_activations));
  RETURN_IF_ERROR(s.Bool("cpu_checkpointing", &a->cpu_checkpointing));
  RETURN_IF_ERROR(s.Bool("contiguous_memory_optimization", &a->contiguous_memory_optimization));
  RETURN_IF_ERROR(s.Int("number_checkpoints", 0, kMaxInt, &a->number_checkpoints));
  RETURN_IF_ERROR(s.Bool("synchronize_checkpoint_boundary", &a->synchronize_checkpoint_boundary));
  RETURN_IF_ERROR(s.Bool("profile", &a->profile));
  // DeepSpeed's own section: zeroshard's policy is zeroshard.activation_checkpointing.
  for (const char* k : {"partition_activations", "cpu_checkpointing",
                        "contiguous_memory_optimization", "number_checkpoints",
                        "synchronize_checkpoint_boundary", "profile"}) {
    s.NoEffect(k);
  }
  s.Finish();
  return absl::OkStatus();
}

// About ten evaluations a run, on printed steps: steps_per_print times
// round(steps / (10 * steps_per_print)), at least steps_per_print.
uint64_t DefaultEvalEverySteps(uint64_t steps, int steps_per_print) {
  const uint64_t print = static_cast<uint64_t>(std::max(steps_per_print, 1));
  const uint64_t times = (steps + 5 * print) / (10 * print);
  return print * std::max<uint64_t>(times, 1);
}

absl::Status ParseCluster(Section& root, const ConfigOverrides& ov, TrainingConfig* c) {
  ClusterConfig& z = c->cluster;
  ASSIGN_OR_RETURN(Section s, root.Child("zeroshard"));
  if (const json* servers = s.Get("servers"); servers != nullptr && servers->is_array()) {
    for (const json& a : *servers) {
      if (!a.is_string() || a.get<std::string>().empty()) {
        return s.Bad("servers", *servers, "a server count or a list of \"host:port\" strings");
      }
      z.server_addresses.push_back(a.get<std::string>());
    }
    if (z.server_addresses.empty()) {
      return s.Bad("servers", *servers, "a non-empty list of \"host:port\" strings");
    }
    z.servers = static_cast<int>(z.server_addresses.size());
  } else if (servers != nullptr) {
    if (!servers->is_number_integer() || servers->get<int64_t>() < 1 ||
        servers->get<int64_t>() > kMaxClusterProcesses) {
      return s.Bad("servers", *servers, "a server count in [1, 4096] or a list of \"host:port\"");
    }
    z.servers = servers->get<int>();
  }
  RETURN_IF_ERROR(s.Int("workers", 1, kMaxClusterProcesses, &z.workers));
  RETURN_IF_ERROR(s.Int("replicas", 1, 2, &z.replicas));
  RETURN_IF_ERROR(
      s.Int("replica_check_every_steps", 0, kMaxI64, &z.replica_check_every_steps));
  RETURN_IF_ERROR(s.Enum("placement", kPlacementNames, &z.placement));
  ASSIGN_OR_RETURN(Section m, s.Child("model"));
  RETURN_IF_ERROR(m.String("arch", &z.model.arch));
  RETURN_IF_ERROR(m.Int("layers", 1, 4096, &z.model.layers));
  RETURN_IF_ERROR(m.Int("heads", 1, 4096, &z.model.heads));
  RETURN_IF_ERROR(m.Int("width", 1, 1 << 20, &z.model.width));
  RETURN_IF_ERROR(m.Int("vocab", 1, 1 << 24, &z.model.vocab));
  RETURN_IF_ERROR(m.Int("context", 1, 1 << 20, &z.model.context));
  // Llama's keys (model/llama_arch.h); an architecture without them
  // refuses them by name (ModelArch::Validate).
  RETURN_IF_ERROR(m.Int("kv_heads", 1, 4096, &z.model.kv_heads));
  RETURN_IF_ERROR(m.Int("mlp_width", 1, 1 << 20, &z.model.mlp_width));
  RETURN_IF_ERROR(m.Double("rope_theta", 1.0 + 1e-9, 1e12, &z.model.rope_theta));
  RETURN_IF_ERROR(m.Double("norm_eps", 1e-12, 1, &z.model.norm_eps));
  RETURN_IF_ERROR(m.Bool("tie_embeddings", &z.model.tie_embeddings));
  m.Finish();
  ASSIGN_OR_RETURN(Section d, s.Child("data"));
  // A path list: a string or a list of non-empty strings (globs allowed).
  auto path_list = [&d](const char* key, std::vector<std::string>* out) -> absl::Status {
    const json* v = d.Get(key);
    if (v == nullptr) return absl::OkStatus();
    if (v->is_string() && !v->get<std::string>().empty()) {
      out->push_back(v->get<std::string>());
      return absl::OkStatus();
    }
    if (!v->is_array() || v->empty()) return d.Bad(key, *v, "a path, a glob or a list of them");
    for (const json& p : *v) {
      if (!p.is_string() || p.get<std::string>().empty()) {
        return d.Bad(key, *v, "a list of non-empty path or glob strings");
      }
      out->push_back(p.get<std::string>());
    }
    return absl::OkStatus();
  };
  std::vector<std::string> train;
  RETURN_IF_ERROR(path_list("paths", &z.data.paths));
  RETURN_IF_ERROR(path_list("train", &train));
  if (!z.data.paths.empty() && !train.empty()) {
    return absl::InvalidArgumentError(
        "config keys \"zeroshard.data.paths\" and \"zeroshard.data.train\" are the same list; "
        "give one");
  }
  RETURN_IF_ERROR(path_list("validation", &z.data.validation_paths));
  // Absent: by the header's magic for token files, bytes for text.
  z.data.format = !train.empty() ? DataFormat::kAuto : DataFormat::kBytes;
  RETURN_IF_ERROR(d.Enum("format", kDataFormatNames, &z.data.format));
  if (!train.empty()) {
    z.data.paths = std::move(train);
    z.data.paths_key = "zeroshard.data.train";
  }
  if (z.data.paths.empty() && z.data.format != DataFormat::kBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"zeroshard.data.format\" is \"", DataFormatName(z.data.format),
        "\" but no token files are given in \"zeroshard.data.train\""));
  }
  std::optional<int64_t> data_seed;
  ASSIGN_OR_RETURN(data_seed, d.IntOrAuto("seed", 0, kMaxI64, true));
  RETURN_IF_ERROR(d.Double("validation_fraction", 0, 0.5, &z.data.validation_fraction));
  std::optional<int64_t> eval_every;
  ASSIGN_OR_RETURN(eval_every, d.IntOrAuto("eval_every_steps", 0, kMaxI64, true));
  RETURN_IF_ERROR(d.Int("eval_batches", 0, 1 << 20, &z.data.eval_batches));
  d.Finish();
  if (const json* g = s.Get("param_groups")) {
    ASSIGN_OR_RETURN(c->param_groups, ParseParamGroups(g->dump()));
  }
  RETURN_IF_ERROR(s.Int("steps", 1, kMaxTrainSteps, &z.steps));
  RETURN_IF_ERROR(s.Int("seed", 0, kMaxI64, &z.seed));
  z.data.seed = data_seed.has_value() ? static_cast<uint64_t>(*data_seed) : z.seed;
  RETURN_IF_ERROR(s.Double("init_std", 1e-12, 10, &z.init_std));
  RETURN_IF_ERROR(s.Int("chunk_elems", 0, kMaxI64, &z.chunk_elems));
  // Without a metrics section a run writes metrics.csv and loss.svg, as the
  // README shows; "path": "" and "plot": "" turn them off.
  ASSIGN_OR_RETURN(Section met, s.Child("metrics"));
  const bool metrics_path_given = met.Get("path") != nullptr;
  RETURN_IF_ERROR(met.String("path", &z.metrics_path));
  RETURN_IF_ERROR(met.Enum("format", kMetricsFormatNames, &z.metrics_format));
  if (!metrics_path_given && z.metrics_format == MetricsFormat::kJsonl) {
    z.metrics_path = "metrics.jsonl";
  }
  met.Finish();
  RETURN_IF_ERROR(s.String("plot", &z.plot_path));
  // "checkpoint_dir" is the older spelling of checkpoint.dir.
  RETURN_IF_ERROR(s.String("checkpoint_dir", &z.checkpoint.dir));
  ASSIGN_OR_RETURN(Section ck, s.Child("checkpoint"));
  RETURN_IF_ERROR(ck.String("dir", &z.checkpoint.dir));
  RETURN_IF_ERROR(ck.Int("every_steps", 0, kMaxI64, &z.checkpoint.every_steps));
  RETURN_IF_ERROR(ck.Int("keep_last", 0, kMaxInt, &z.checkpoint.keep_last));
  ck.Finish();
  ASSIGN_OR_RETURN(Section sm, s.Child("sample"));
  RETURN_IF_ERROR(sm.Bool("enabled", &z.sample.enabled));
  RETURN_IF_ERROR(sm.String("prompt", &z.sample.prompt));
  RETURN_IF_ERROR(sm.Int("max_new_tokens", 0, 1 << 20, &z.sample.max_new_tokens));
  RETURN_IF_ERROR(sm.Double("temperature", 0, 1e6, &z.sample.temperature));
  RETURN_IF_ERROR(sm.Int("top_k", 0, kMaxInt, &z.sample.top_k));
  RETURN_IF_ERROR(sm.Int("seed", 0, kMaxI64, &z.sample.seed));
  RETURN_IF_ERROR(sm.String("vocab", &z.sample.vocab));
  RETURN_IF_ERROR(sm.String("merges", &z.sample.merges));
  if (z.sample.vocab.empty() != z.sample.merges.empty()) {
    return absl::InvalidArgumentError(
        "config keys \"zeroshard.sample.vocab\" and \"zeroshard.sample.merges\" "
        "go together: a GPT-2 vocabulary is both files (vocab.json + merges.txt)");
  }
  sm.Finish();
  // Secrets stay out of configuration files (which get logged, copied and
  // committed): the config names a credentials directory instead.
  std::string secret;
  RETURN_IF_ERROR(s.String("admin_token", &secret));
  if (!secret.empty()) {
    return absl::InvalidArgumentError(
        "zeroshard.admin_token is no longer read: secrets do not belong in a "
        "configuration file; put role tokens and certificates in a "
        "credentials directory (scripts/make-dev-credentials.sh) and name it "
        "in zeroshard.credentials");
  }
  RETURN_IF_ERROR(s.String("credentials", &z.credentials));
  RETURN_IF_ERROR(s.Bool("shared_memory", &z.shared_memory));
  ASSIGN_OR_RETURN(Section t, s.Child("timeouts"));
  RETURN_IF_ERROR(t.Double("step_seconds", 1e-3, 1e7, &z.step_timeout_s));
  RETURN_IF_ERROR(t.Double("startup_seconds", 1e-3, 1e7, &z.startup_timeout_s));
  t.Finish();
  ASSIGN_OR_RETURN(Section ac, s.Child("activation_checkpointing"));
  RETURN_IF_ERROR(ac.Enum("policy", kCheckpointPolicyNames,
                          &c->activation_checkpointing.policy));
  RETURN_IF_ERROR(ac.Int("k", 1, 4096, &c->activation_checkpointing.k));
  ac.Finish();
  RETURN_IF_ERROR(s.Int("max_overflows_at_min_scale", 1, kMaxInt, &z.max_overflows_at_min_scale));
  s.Finish();

  if (ov.servers.has_value()) {
    if (!z.server_addresses.empty() && *ov.servers != z.servers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "servers override ", *ov.servers, " conflicts with the ", z.servers,
          " addresses in config key \"zeroshard.servers\""));
    }
    z.servers = *ov.servers;
  }
  if (ov.workers.has_value()) z.workers = *ov.workers;
  if (ov.steps.has_value()) z.steps = *ov.steps;
  if (z.servers < 1 || z.workers < 1 || z.steps < 1) {
    return absl::InvalidArgumentError("servers, workers and steps must all be >= 1");
  }
  if (z.replicas == 2 && z.servers < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key \"zeroshard.replicas\" is 2, which needs at least 2 "
        "servers (each slot's second copy lives on the next server); the "
        "cluster has ", z.servers));
  }
  z.data.eval_every_steps = eval_every.has_value() ? static_cast<uint64_t>(*eval_every)
                                                   : DefaultEvalEverySteps(z.steps, c->steps_per_print);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedConfig> ParseTrainingConfig(std::string_view json_text,
                                                 const ConfigOverrides& overrides) {
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end(), /*cb=*/nullptr,
                      /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config is not valid JSON: ", e.what()));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError("config must be a JSON object at the top level");
  }
  ParsedConfig out;
  TrainingConfig& c = out.config;
  std::vector<std::string> unknown, no_effect;
  Section root(&doc, "", &unknown, &no_effect);

  ASSIGN_OR_RETURN(std::optional<int64_t> tbs, root.IntOrAuto("train_batch_size", 1, kMaxInt, true));
  ASSIGN_OR_RETURN(std::optional<int64_t> mbs,
                   root.IntOrAuto("train_micro_batch_size_per_gpu", 1, kMaxInt, true));
  ASSIGN_OR_RETURN(std::optional<int64_t> gas,
                   root.IntOrAuto("gradient_accumulation_steps", 1, kMaxInt, true));
  RETURN_IF_ERROR(root.Double("gradient_clipping", 0, 1e30, &c.gradient_clipping, true));
  RETURN_IF_ERROR(root.Int("steps_per_print", 1, kMaxInt, &c.steps_per_print));
  RETURN_IF_ERROR(root.Bool("wall_clock_breakdown", &c.wall_clock_breakdown));
  root.NoEffect("wall_clock_breakdown");
  for (const char* k : kDeepSpeedOnlySections) root.NoEffect(k);
  RETURN_IF_ERROR(ParsePrecision(root, &c));
  config_internal::ClassRules class_rules;
  ASSIGN_OR_RETURN(bool lr_explicit,
                   config_internal::ParseOptimizer(root, &c.optimizer, &class_rules));
  RETURN_IF_ERROR(ParseZero(root, &c.zero, &out.front_end_only));
  RETURN_IF_ERROR(ParseActivationCheckpointing(root, &c.activation_checkpointing));
  RETURN_IF_ERROR(ParseCluster(root, overrides, &c));
  RETURN_IF_ERROR(
      ParseScheduler(root, lr_explicit, c.cluster.steps, &c.optimizer, &out.warnings));
  root.Finish();
  config_internal::ApplyClassRules(class_rules, doc, &c, &out.warnings);

  auto as_int = [](const std::optional<int64_t>& v) {
    return v.has_value() ? std::optional<int>(static_cast<int>(*v)) : std::optional<int>();
  };
  // Neither train_batch_size nor the micro batch given (both "auto" or
  // absent, as Hugging Face's DeepSpeed configs write them): the micro batch
  // takes Hugging Face Trainer's per_device_train_batch_size default, and the
  // choice is printed.
  const bool batch_defaulted = !tbs.has_value() && !mbs.has_value();
  if (batch_defaulted) mbs = kDefaultMicroBatch;
  RETURN_IF_ERROR(
      ResolveBatchSizes(as_int(tbs), as_int(mbs), as_int(gas), c.cluster.workers, &c));
  if (batch_defaulted) {
    out.warnings.push_back(absl::StrCat(
        "config keys \"train_batch_size\" and \"train_micro_batch_size_per_gpu\" are \"auto\" "
        "or absent: using train_micro_batch_size_per_gpu = ", c.micro_batch_size,
        " (the default), gradient_accumulation_steps = ", c.gradient_accumulation_steps,
        ", train_batch_size = ", c.train_batch_size, " (", c.cluster.workers, " worker",
        c.cluster.workers == 1 ? "" : "s", ")"));
  }
  if (!no_effect.empty() || !unknown.empty()) {
    std::string w;
    if (!no_effect.empty()) {
      absl::StrAppend(&w, "config keys with no effect in zeroshard (accepted, ignored): ",
                      absl::StrJoin(no_effect, ", "));
    }
    if (!unknown.empty()) {
      absl::StrAppend(&w, w.empty() ? "" : "; ",
                      "unknown config keys (ignored; check the spelling): ",
                      absl::StrJoin(unknown, ", "));
    }
    out.warnings.push_back(std::move(w));
  }
  RETURN_IF_ERROR(ValidateTrainingConfig(c));
  return out;
}

}  // namespace zeroshard
