// zeroshard-ctl estimate: model-state memory per GPU under DDP and ZeRO-1/2/3,
// zeroshard's worker/server split per stage, activations, bytes on the wire
// and a step-time model (model/memory_estimate.h), offline.
//
//   zeroshard-ctl estimate --params=7e9 --workers=8 --servers=4
//   zeroshard-ctl estimate --config=examples/gpt-small.json --stage=1 --json
//
// --servers is a count here (a HOST:PORT list counts its entries). Flags
// given on the command line override the config file's values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/ctl/commands.h"
#include "common/config.h"
#include "model/memory_estimate.h"
#include "model/torch_rank_estimate.h"

ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(int, workers);
ABSL_DECLARE_FLAG(int, num_servers);
ABSL_DECLARE_FLAG(int, replicas);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(int, layers);
ABSL_DECLARE_FLAG(int, heads);
ABSL_DECLARE_FLAG(int, width);
ABSL_DECLARE_FLAG(int, vocab);
ABSL_DECLARE_FLAG(int, context);

ABSL_FLAG(double, params, 0,
          "estimate: parameters Ψ, e.g. 7e9 (default: from the model shape)");
ABSL_FLAG(int, stage, 0, "estimate: ZeRO stage 1, 2 or 3 (default: the "
                         "config's, else 3)");
ABSL_FLAG(std::string, precision, "",
          "estimate: bf16, fp16 or fp32 (default: the config's, else bf16)");
ABSL_FLAG(std::string, grad_wire, "",
          "estimate: pushed gradients fp32 or bf16 (default: the config's "
          "communication_data_type, else fp32)");
ABSL_FLAG(int, micro_batch, 0, "estimate: sequences per micro-batch per worker "
                               "(default: the config's, else 1)");
ABSL_FLAG(int, seq, 0, "estimate: tokens per sequence (0: the context)");
ABSL_FLAG(int, grad_accum, 0, "estimate: micro-batches per step (default: "
                              "the config's, else 1)");
ABSL_FLAG(std::string, checkpointing, "",
          "estimate: none, every_block or every_k (default: the config's)");
ABSL_FLAG(int, checkpoint_k, 0, "estimate: every_k's k");
ABSL_FLAG(std::string, attention, "probs",
          "estimate: the GPU worker's attention, probs (saves the "
          "probabilities, B·H·T² per block), online or flash (both save each "
          "row's log-sum-exp, B·H·T)");
ABSL_FLAG(std::string, shared_memory, "",
          "estimate: true when the servers share the workers' host and "
          "regions are on (zeroshard-train's embedded cluster), false when "
          "they are elsewhere (default: the config's zeroshard.shared_memory, "
          "else false)");
ABSL_FLAG(double, link_gbps, 100, "estimate: network Gbit/s per process, "
                                  "each direction");
ABSL_FLAG(double, mem_gbps, 2000, "estimate: accelerator memory GB/s");
ABSL_FLAG(double, flops, 312e12, "estimate: accelerator FLOP/s");
ABSL_FLAG(double, server_mem_gbps, 50, "estimate: shard server DRAM GB/s");
ABSL_FLAG(std::string, torch_units, "",
          "estimate: a PyTorch front-end rank instead: its units' sizes in "
          "elements, padded as the flat layout pads them (engine._layout."
          "units()), comma-separated; with --workers, --stage, --precision");
ABSL_FLAG(uint64_t, stage3_max_reuse_distance,
          zeroshard::ZeroConfig{}.stage3_max_reuse_distance,
          "estimate --torch_units, stage 3: zero_optimization's key, as the "
          "front-end keeps units (0: none kept)");
ABSL_FLAG(uint64_t, stage3_param_persistence_threshold,
          zeroshard::ZeroConfig{}.stage3_param_persistence_threshold,
          "estimate --torch_units, stage 3: units of at most this many "
          "elements stay gathered for the whole step (0: none)");
ABSL_FLAG(uint64_t, stage3_prefetch_bucket_size,
          zeroshard::ZeroConfig{}.stage3_prefetch_bucket_size,
          "estimate --torch_units, stage 3: the elements prefetched together");
ABSL_FLAG(uint64_t, stage3_max_live_parameters,
          zeroshard::ZeroConfig{}.stage3_max_live_parameters,
          "estimate --torch_units, stage 3: the elements the kept units may "
          "hold");
ABSL_FLAG(double, device_gb, 0,
          "estimate: a worker device's memory in GB (1e9 bytes): say whether "
          "a worker fits in it, and by how much (0: no verdict)");
ABSL_FLAG(double, worker_base_mib, -1,
          "estimate: a worker process's fixed RSS (-1: the measured constant)");
ABSL_FLAG(double, server_base_mib, -1,
          "estimate: a server process's fixed RSS (-1: the measured constant)");
ABSL_FLAG(std::string, bf16_gemm, "auto",
          "estimate: how the CPU workers run BF16 products: native (AVX-512), "
          "widened (to FP32, no AVX-512; adds the FP32 copies) or auto (this "
          "CPU)");

namespace zeroshard::ctl {
namespace {

// The command line, for Given.
const CommandLine* g_command_line = nullptr;

// Whether --name (or -name, with or without =value) was on the command line.
bool Given(const char* name) {
  return g_command_line != nullptr && g_command_line->Given(name);
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "estimate: %s\n", message.c_str());
  return 2;
}

// "112.0 GB (104.3 GiB)": the ZeRO paper and the seed count in GB.
std::string Both(double bytes) {
  return absl::StrFormat("%.4g GB (%s)", bytes / 1e9, HumanBytes(bytes));
}

std::optional<Precision> ParsePrecision(const std::string& s) {
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16") return Precision::kFp16;
  if (s == "fp32") return Precision::kFp32;
  return std::nullopt;
}

std::optional<CheckpointPolicy> ParsePolicy(const std::string& s) {
  if (s == "none") return CheckpointPolicy::kNone;
  if (s == "every_block") return CheckpointPolicy::kEveryBlock;
  if (s == "every_k") return CheckpointPolicy::kEveryK;
  return std::nullopt;
}

// Fills `in` from --config and the flags; returns an exit code on error.
std::optional<int> BuildInput(EstimateInput* in) {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  std::optional<TrainingConfig> cfg;
  if (!config_path.empty()) {
    // Resolved with the file's own counts; --workers then changes N and
    // keeps the micro batch and accumulation (a per-worker estimate), where
    // a launcher would re-derive them from train_batch_size.
    absl::StatusOr<ParsedConfig> parsed = LoadTrainingConfig(config_path);
    if (!parsed.ok()) {
      std::fprintf(stderr, "estimate: %s\n",
                   parsed.status().ToString().c_str());
      return 1;
    }
    cfg = parsed->config;
    in->model = cfg->cluster.model;
    in->workers = cfg->cluster.workers;
    in->servers = cfg->cluster.servers;
    in->replicas = cfg->cluster.replicas;
    in->stage = cfg->zero.stage;
    in->precision = cfg->precision;
    in->grad_wire = cfg->communication_data_type;
    in->optimizer = cfg->optimizer.kind;
    in->optimizer_rule = cfg->optimizer.rule;
    in->param_groups = cfg->param_groups;
    in->micro_batch = cfg->micro_batch_size;
    in->grad_accum = cfg->gradient_accumulation_steps;
    in->checkpointing = cfg->activation_checkpointing.policy;
    in->checkpoint_k = cfg->activation_checkpointing.k;
    in->shared_memory = cfg->cluster.shared_memory;
  }
  if (Given("shared_memory")) {
    const std::string v = absl::GetFlag(FLAGS_shared_memory);
    if (v != "true" && v != "false") {
      return Usage(absl::StrCat("--shared_memory must be true or false, got '",
                                v, "'"));
    }
    in->shared_memory = v == "true";
  }
  // Model shape: any shape flag given overrides that field (and asks for a
  // shape when there is no config).
  const char* shape_flags[] = {"arch",     "layers",    "heads",      "width",
                                "vocab",    "context",   "kv_heads",   "mlp_width",
                                "rope_theta", "norm_eps", "tie_embeddings"};
  bool any_shape = false;
  for (const char* f : shape_flags) any_shape = any_shape || Given(f);
  if (any_shape) {
    const ModelShape flags = ShapeFromFlags();
    ModelShape s = in->model.value_or(flags);
    if (Given("arch")) s.arch = flags.arch;
    if (Given("layers")) s.layers = flags.layers;
    if (Given("heads")) s.heads = flags.heads;
    if (Given("width")) s.width = flags.width;
    if (Given("vocab")) s.vocab = flags.vocab;
    if (Given("context")) s.context = flags.context;
    if (Given("kv_heads")) s.kv_heads = flags.kv_heads;
    if (Given("mlp_width")) s.mlp_width = flags.mlp_width;
    if (Given("rope_theta")) s.rope_theta = flags.rope_theta;
    if (Given("norm_eps")) s.norm_eps = flags.norm_eps;
    if (Given("tie_embeddings")) s.tie_embeddings = flags.tie_embeddings;
    in->model = s;
  }
  if (Given("params") && in->model.has_value()) {
    // Ψ would come from the flag and the activations from the shape: two
    // models at once. One of them, said so.
    return Usage(absl::StrCat(
        "--params=", absl::GetFlag(FLAGS_params), " and a model shape (",
        config_path.empty() ? "the shape flags" : "--config's zeroshard.model",
        ") both give the model: leave --params out to estimate the shape's "
        "model, or give --params alone"));
  }
  if (Given("params")) {
    in->params = absl::GetFlag(FLAGS_params);
    if (!(in->params > 0) || !std::isfinite(in->params)) {
      return Usage(absl::StrCat("--params must be a positive number, got ",
                                absl::GetFlag(FLAGS_params)));
    }
  } else if (!in->model.has_value()) {
    return Usage("give --params=Ψ, a model shape (--layers --heads --width "
                 "--vocab --context) or --config=FILE");
  }
  if (Given("workers")) {
    in->workers = absl::GetFlag(FLAGS_workers);
    if (in->workers < 1) {
      return Usage(absl::StrCat("--workers must be >= 1, got ", in->workers));
    }
  }
  if (Given("servers")) {
    const std::string s = absl::GetFlag(FLAGS_servers);
    int count = 0;
    if (absl::SimpleAtoi(s, &count)) {
      if (count < 1) {
        return Usage(absl::StrCat("--servers must be >= 1, got ", count));
      }
    } else if (s.find(':') != std::string::npos) {
      count = static_cast<int>(
          std::vector<std::string>(absl::StrSplit(s, ',', absl::SkipEmpty()))
              .size());
    } else {
      return Usage(absl::StrCat("--servers must be a count or a HOST:PORT "
                                "list, got '", s, "'"));
    }
    in->servers = count;
  } else if (Given("num_servers")) {
    in->servers = absl::GetFlag(FLAGS_num_servers);
    if (in->servers < 1) {
      return Usage(absl::StrCat("--num_servers must be >= 1, got ",
                                in->servers));
    }
  }
  if (Given("replicas")) {
    in->replicas = absl::GetFlag(FLAGS_replicas);
    if (in->replicas < 1 || in->replicas > 2) {
      return Usage(absl::StrCat("--replicas must be 1 or 2, got ",
                                in->replicas));
    }
  }
  if (in->replicas == 2 && in->servers < 2) {
    return Usage(absl::StrCat("--replicas 2 needs at least 2 servers, got ",
                              in->servers));
  }
  if (Given("stage")) {
    in->stage = absl::GetFlag(FLAGS_stage);
    if (in->stage < 1 || in->stage > 3) {
      return Usage(absl::StrCat("--stage must be 1, 2 or 3, got ", in->stage));
    }
  }
  if (Given("precision")) {
    auto p = ParsePrecision(absl::GetFlag(FLAGS_precision));
    if (!p) {
      return Usage(absl::StrCat("--precision must be bf16, fp16 or fp32, got '",
                                absl::GetFlag(FLAGS_precision), "'"));
    }
    in->precision = *p;
  }
  if (Given("grad_wire")) {
    const std::string g = absl::GetFlag(FLAGS_grad_wire);
    if (g != "fp32" && g != "bf16") {
      return Usage(absl::StrCat("--grad_wire must be fp32 or bf16, got '", g,
                                "'"));
    }
    in->grad_wire = g == "bf16" ? CommDataType::kBf16 : CommDataType::kFp32;
  }
  if (Given("checkpointing")) {
    auto p = ParsePolicy(absl::GetFlag(FLAGS_checkpointing));
    if (!p) {
      return Usage(absl::StrCat("--checkpointing must be none, every_block or "
                                "every_k, got '",
                                absl::GetFlag(FLAGS_checkpointing), "'"));
    }
    in->checkpointing = *p;
  }
  if (Given("checkpoint_k")) in->checkpoint_k = absl::GetFlag(FLAGS_checkpoint_k);
  const std::string attention = absl::GetFlag(FLAGS_attention);
  if (attention != "probs" && attention != "online" && attention != "flash") {
    return Usage(absl::StrCat(
        "--attention must be probs, online or flash, got '", attention, "'"));
  }
  in->online_attention = attention != "probs";
  if (Given("micro_batch")) in->micro_batch = absl::GetFlag(FLAGS_micro_batch);
  if (Given("grad_accum")) in->grad_accum = absl::GetFlag(FLAGS_grad_accum);
  in->seq = absl::GetFlag(FLAGS_seq);
  in->link_gbps = absl::GetFlag(FLAGS_link_gbps);
  in->mem_gbps = absl::GetFlag(FLAGS_mem_gbps);
  in->flops = absl::GetFlag(FLAGS_flops);
  in->server_mem_gbps = absl::GetFlag(FLAGS_server_mem_gbps);
  if (Given("worker_base_mib")) {
    in->worker_base_bytes = absl::GetFlag(FLAGS_worker_base_mib) * 1048576;
  }
  if (Given("server_base_mib")) {
    in->server_base_bytes = absl::GetFlag(FLAGS_server_base_mib) * 1048576;
  }
  const std::string gemm = absl::GetFlag(FLAGS_bf16_gemm);
  if (gemm == "auto") {
    in->bf16_gemm_widened = CpuWidensBf16Gemm();
  } else if (gemm == "native" || gemm == "widened") {
    in->bf16_gemm_widened = gemm == "widened";
  } else {
    return Usage(absl::StrCat("--bf16_gemm must be auto, native or widened, got '",
                              gemm, "'"));
  }
  return std::nullopt;
}

// Display width of UTF-8 text (Ψ is two bytes, one column).
size_t Columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// PrintTable, padding by display width rather than bytes.
void PrintRows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], Columns(row[i]));
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(width[i] - Columns(row[i]) + 2, ' ');
      }
    }
    std::printf("%s\n", line.c_str());
  }
}

nlohmann::json TermsJson(const ProcessEstimate& p) {
  nlohmann::json terms = nlohmann::json::array();
  for (size_t i = 0; i < p.terms.size(); ++i) {
    terms.push_back({{"name", p.terms[i].name},
                     {"formula", p.terms[i].formula},
                     {"bytes", p.terms[i].bytes},
                     {"model_state", static_cast<int>(i) < p.model_state_terms}});
  }
  return {{"terms", terms},
          {"model_state_bytes", p.model_state_bytes()},
          {"total_bytes", p.total()}};
}

nlohmann::json ToJson(const MemoryEstimate& e) {
  const EstimateInput& in = e.input;
  nlohmann::json j;
  j["input"] = {{"params", e.params},
                {"workers", in.workers},
                {"servers", in.servers},
                {"replicas", in.replicas},
                {"stage", in.stage},
                {"precision", PrecisionName(in.precision)},
                {"grad_wire", CommDataTypeName(in.grad_wire)},
                {"micro_batch", in.micro_batch},
                {"grad_accum", in.grad_accum},
                {"checkpointing", CheckpointPolicyName(in.checkpointing)},
                {"link_gbps", in.link_gbps},
                {"mem_gbps", in.mem_gbps},
                {"flops", in.flops},
                {"server_mem_gbps", in.server_mem_gbps},
                {"bf16_gemm", in.bf16_gemm_widened ? "widened" : "native"},
                {"shared_memory", in.shared_memory}};
  if (in.model) {
    j["input"]["model"] = {{"layers", in.model->layers},
                           {"heads", in.model->heads},
                           {"width", in.model->width},
                           {"vocab", in.model->vocab},
                           {"context", in.model->context}};
  }
  nlohmann::json zero = nlohmann::json::array();
  for (const ZeroStageBytes& z : e.zero) {
    zero.push_back({{"scheme", z.scheme},
                    {"formula", z.formula},
                    {"per_gpu_bytes", z.per_gpu_bytes},
                    {"cluster_bytes", z.cluster_bytes}});
  }
  j["zero"] = zero;
  j["zero1_note"] = e.zero1_note;
  j["zeroshard"]["largest_server_params"] = e.largest_server_params;
  j["zeroshard"]["largest_whole_tensor"] = e.largest_whole_tensor;
  for (int s = 1; s <= 3; ++s) {
    const std::string key = absl::StrCat("stage", s);
    j["zeroshard"]["worker"][key] = TermsJson(e.worker[s - 1]);
    j["zeroshard"]["server"][key] = TermsJson(e.server[s - 1]);
  }
  const ActivationEstimate& a = e.activations;
  j["activations"] = {{"known", a.known},
                      {"attention", absl::GetFlag(FLAGS_attention)},
                      {"per_block_internals_bytes", a.per_block_internals},
                      {"block_input_bytes", a.block_input},
                      {"none_bytes", a.none},
                      {"every_block_bytes", a.every_block},
                      {"chosen_bytes", a.chosen},
                      {"scratch_bytes", a.scratch}};
  const WireEstimate& w = e.wire;
  j["wire"] = {{"gather_per_worker_bytes", w.gather_per_worker},
               {"push_per_worker_bytes", w.push_per_worker},
               {"allgather_per_worker_bytes", w.allgather_per_worker},
               {"reduce_scatter_per_worker_bytes", w.reduce_scatter_per_worker},
               {"allgathers_per_step", w.allgathers_per_step},
               {"reduce_scatters_per_step", w.reduce_scatters_per_step},
               {"worker_sent_bytes", w.worker_sent()},
               {"worker_received_bytes", w.worker_received()},
               {"per_server_out_bytes", w.per_server_out},
               {"per_server_in_bytes", w.per_server_in}};
  const StepTimeEstimate& t = e.time;
  j["step_time"] = {{"flops_per_worker", t.flops_per_worker},
                    {"compute_s", t.compute_s},
                    {"memory_bytes", t.memory_bytes},
                    {"memory_s", t.memory_s},
                    {"worker_link_s", t.worker_link_s},
                    {"server_link_s", t.server_link_s},
                    {"optimizer_s", t.optimizer_s},
                    {"serial_s", t.serial_s},
                    {"overlapped_s", t.overlapped_s}};
  return j;
}

// One table: the terms of stages 1..3 side by side (a term missing from a
// stage prints "-").
void PrintProcess(const ProcessEstimate (&p)[3], const char* who) {
  // The union of the stages' terms, each new one placed after the term
  // that precedes it in its own stage.
  std::vector<std::pair<std::string, std::string>> names;
  for (const ProcessEstimate& s : p) {
    size_t after = 0;  // insertion point: just past the previous term
    for (const EstimateTerm& t : s.terms) {
      size_t at = names.size();
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i].first == t.name) at = i;
      }
      if (at == names.size()) {
        at = std::min(after, names.size());
        names.insert(names.begin() + static_cast<long>(at), {t.name, t.formula});
      }
      after = at + 1;
    }
  }
  std::vector<std::vector<std::string>> rows = {
      {who, "formula", "stage 1", "stage 2", "stage 3"}};
  for (const auto& [name, formula] : names) {
    std::vector<std::string> row = {"  " + name, formula};
    for (const ProcessEstimate& s : p) {
      std::string cell = "-";
      for (const EstimateTerm& t : s.terms) {
        if (t.name == name) cell = HumanBytes(t.bytes);
      }
      row.push_back(cell);
    }
    rows.push_back(row);
  }
  std::vector<std::string> state = {"  model state", ""};
  std::vector<std::string> total = {"  resident (estimate)", ""};
  for (const ProcessEstimate& s : p) {
    state.push_back(HumanBytes(s.model_state_bytes()));
    total.push_back(HumanBytes(s.total()));
  }
  rows.push_back(state);
  rows.push_back(total);
  PrintRows(rows);
}

void PrintText(const MemoryEstimate& e) {
  const EstimateInput& in = e.input;
  std::printf("Ψ = %.0f parameters (%.3g), N = %d workers, S = %d servers, "
              "stage %d, %s\n\n",
              e.params, e.params, in.workers, in.servers, in.stage,
              PrecisionName(in.precision));
  if (in.shared_memory) {
    std::printf("shared memory: the servers share the workers' host, so each "
                "worker pushes and gathers through a region with each server "
                "(counted in both; --shared_memory=false for servers "
                "elsewhere)\n\n");
  }
  if (in.replicas > 1) {
    std::printf("replicas %d: each server also keeps a copy of the slot "
                "before its own (its state twice over), each worker pushes "
                "its gradient to both copies, and every update runs on both "
                "servers\n\n",
                in.replicas);
  }
  if (in.bf16_gemm_widened && in.precision == Precision::kBf16) {
    std::printf("CPU workers without AVX-512 widen BF16 products to FP32 "
                "(--bf16_gemm=native for a CPU with it)\n\n");
  }
  std::printf("Model states per GPU (ZeRO paper, mixed-precision Adam, "
              "K = 12 B/param):\n");
  std::vector<std::vector<std::string>> rows = {
      {"scheme", "formula", "per GPU", "all N GPUs"}};
  for (const ZeroStageBytes& z : e.zero) {
    rows.push_back({z.scheme + (z.scheme == "ZeRO-1" ? " *" : ""), z.formula,
                    Both(z.per_gpu_bytes), Both(z.cluster_bytes)});
  }
  PrintRows(rows);
  std::printf("* %s.\n\n", e.zero1_note.c_str());

  std::printf("zeroshard, per worker (model state on the worker; the "
              "optimizer lives on the servers):\n");
  PrintProcess(e.worker, "worker");
  std::printf("\nzeroshard, per server (the same under every stage):\n");
  if (e.largest_server_params != e.params / in.servers) {
    std::printf("(the largest server: Ψmax = %.0f elements, %.1f%% of Ψ "
                "against %.1f%% for Ψ/S; the tensors a parameter group's rule "
                "keeps whole move the boundaries; the largest of them, Tmax = "
                "%.0f elements, is copied while it is updated)\n",
                e.largest_server_params, 100 * e.largest_server_params / e.params,
                100.0 / in.servers, e.largest_whole_tensor);
  }
  PrintProcess(e.server, "server");

  const ActivationEstimate& a = e.activations;
  std::printf("\n");
  if (!a.known) {
    std::printf("Activations: give a model shape (--config or --layers "
                "--heads --width --vocab --context)\n");
  } else {
    const int seq = in.seq > 0 ? in.seq : in.model->context;
    std::printf("Activations per worker (micro batch %d, T = %d, %s, %s "
                "attention):\n",
                in.micro_batch, seq, PrecisionName(in.precision),
                absl::GetFlag(FLAGS_attention).c_str());
    PrintRows({{"  one block's saved internals", HumanBytes(a.per_block_internals)},
                {"  one block input", HumanBytes(a.block_input)},
                {"  peak, no checkpointing", HumanBytes(a.none)},
                {"  peak, per-block checkpointing", HumanBytes(a.every_block)},
                {absl::StrCat("  peak, this run (",
                              CheckpointPolicyName(in.checkpointing), ")"),
                 HumanBytes(a.chosen)},
                {"  kernel scratch (FP32, reused)", HumanBytes(a.scratch)}});
  }
  const WireEstimate& w = e.wire;
  std::printf("\nBytes on the wire per optimizer step (stage %d):\n", in.stage);
  PrintRows(
      {{"  worker <- servers: Gather of its partition", HumanBytes(w.gather_per_worker)},
       {"  worker -> servers: PushGrad of its shard", HumanBytes(w.push_per_worker)},
       {absl::StrCat("  worker <-> workers: all-gather, ", w.allgathers_per_step,
                     " pass(es)"),
        HumanBytes(w.allgather_per_worker)},
       {absl::StrCat("  worker <-> workers: reduce-scatter FP32, ",
                     w.reduce_scatters_per_step, " pass(es)"),
        HumanBytes(w.reduce_scatter_per_worker)},
       {"  worker sent / received",
        absl::StrCat(HumanBytes(w.worker_sent()), " / ",
                     HumanBytes(w.worker_received()))},
       {"  server out (Gather) / in (PushGrad)",
        absl::StrCat(HumanBytes(w.per_server_out), " / ",
                     HumanBytes(w.per_server_in))}});
  const StepTimeEstimate& t = e.time;
  const int seq = in.seq > 0 ? in.seq : (in.model ? in.model->context : 1024);
  std::printf("\nStep time per optimizer step (%d x %d tokens x %d micro-batches "
              "per worker; link %.0f Gbit/s, memory %.0f GB/s, %.3g FLOP/s, "
              "server DRAM %.0f GB/s):\n",
              in.micro_batch, seq, in.grad_accum, in.link_gbps, in.mem_gbps,
              in.flops, in.server_mem_gbps);
  auto sec = [](double s) { return absl::StrFormat("%.4g s", s); };
  PrintRows({{"  compute", absl::StrFormat("%.3g FLOP", t.flops_per_worker),
               sec(t.compute_s)},
              {"  accelerator memory", HumanBytes(t.memory_bytes), sec(t.memory_s)},
              {"  worker link", "", sec(t.worker_link_s)},
              {"  server link", "", sec(t.server_link_s)},
              {absl::StrCat("  server update (",
                            OptimizerName(in.optimizer, in.optimizer_rule), ")"),
               "", sec(t.optimizer_s)},
              {"  total, nothing overlapped", "", sec(t.serial_s)},
              {"  total, fully overlapped", "", sec(t.overlapped_s)}});
}

}  // namespace

// Whether one worker of `e` (its stage's resident estimate plus the
// activations' peak and kernel scratch) fits in a device of `device_bytes`.
struct Verdict {
  double needed = 0, device = 0;
  bool fits() const { return needed <= device; }
};
// The worker's terms already hold its activations and kernel scratch
// when the shape is known (model/memory_estimate.cc): the total is what
// the device must hold, counted once.
Verdict WorkerVerdict(const MemoryEstimate& e, double device_bytes) {
  return {e.worker[e.input.stage - 1].total(), device_bytes};
}

std::string VerdictText(const MemoryEstimate& e, const Verdict& v) {
  return absl::StrFormat(
      "A worker in %.4g GB (stage %d%s): %s: it needs %s, %s %s\n",
      v.device / 1e9, e.input.stage,
      e.activations.known ? ", activations included"
                          : "; no model shape, so no activations counted",
      v.fits() ? "fits" : "does NOT fit", Both(v.needed),
      v.fits() ? "leaving" : "short by", Both(std::abs(v.device - v.needed)));
}

// --torch_units: the PyTorch front-end rank's parameter and gradient memory
// (model/torch_rank_estimate.h), as a table or JSON.
int RunTorchRankEstimate() {
  std::vector<uint64_t> units;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_torch_units), ',')) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n == 0) {
      return Usage(absl::StrCat("--torch_units: \"", part, "\" is not a "
                                "positive element count"));
    }
    units.push_back(n);
  }
  const int stage = Given("stage") ? absl::GetFlag(FLAGS_stage) : 3;
  const int workers = Given("workers") ? absl::GetFlag(FLAGS_workers) : 1;
  const std::string p = absl::GetFlag(FLAGS_precision);
  const std::optional<Precision> precision =
      ParsePrecision(p.empty() ? "fp32" : p);
  if (!precision.has_value()) {
    return Usage(absl::StrCat("--precision must be bf16, fp16 or fp32, got '",
                              p, "'"));
  }
  TorchZero3Keep keep;
  keep.max_reuse_distance = absl::GetFlag(FLAGS_stage3_max_reuse_distance);
  keep.persistence_threshold =
      absl::GetFlag(FLAGS_stage3_param_persistence_threshold);
  keep.max_live_parameters = absl::GetFlag(FLAGS_stage3_max_live_parameters);
  keep.prefetch_bucket = absl::GetFlag(FLAGS_stage3_prefetch_bucket_size);
  absl::StatusOr<ProcessEstimate> r =
      EstimateTorchRank(units, workers, stage, *precision, keep);
  if (!r.ok()) return Usage(std::string(r.status().message()));
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = TermsJson(*r);
    j["input"] = {{"units", units.size()}, {"workers", workers},
                  {"stage", stage}, {"precision", p.empty() ? "fp32" : p},
                  {"stage3_max_reuse_distance", keep.max_reuse_distance},
                  {"stage3_param_persistence_threshold",
                   keep.persistence_threshold},
                  {"stage3_max_live_parameters", keep.max_live_parameters},
                  {"stage3_prefetch_bucket_size", keep.prefetch_bucket}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("PyTorch front-end rank, stage %d, %d rank(s), %zu units: "
              "parameters and gradients\n", stage, workers, units.size());
  std::vector<std::vector<std::string>> rows = {{"term", "formula", "bytes"}};
  for (const EstimateTerm& t : r->terms) {
    rows.push_back({t.name, t.formula, HumanBytes(t.bytes)});
  }
  rows.push_back({"model state", "", HumanBytes(r->model_state_bytes())});
  PrintRows(rows);
  return 0;
}

int RunEstimate(const CommandLine& command_line) {
  g_command_line = &command_line;
  if (Given("torch_units")) return RunTorchRankEstimate();
  EstimateInput in;
  if (std::optional<int> rc = BuildInput(&in)) return *rc;
  absl::StatusOr<MemoryEstimate> e = EstimateMemory(in);
  if (!e.ok()) {
    std::fprintf(stderr, "estimate: %s\n", e.status().ToString().c_str());
    return 2;
  }
  const double device_gb = absl::GetFlag(FLAGS_device_gb);
  if (!(device_gb >= 0) || !std::isfinite(device_gb)) {
    return Usage(absl::StrCat("--device_gb must be a size in GB (>= 0), got ",
                              device_gb));
  }
  std::optional<Verdict> verdict;
  if (device_gb > 0) verdict = WorkerVerdict(*e, device_gb * 1e9);
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = ToJson(*e);
    if (verdict.has_value()) {
      j["device"] = {{"memory_bytes", verdict->device},
                     {"worker_needs_bytes", verdict->needed},
                     {"fits", verdict->fits()},
                     {"margin_bytes", verdict->device - verdict->needed}};
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    PrintText(*e);
    if (verdict.has_value()) {
      std::printf("\n%s", VerdictText(*e, *verdict).c_str());
    }
  }
  return 0;
}

}  // namespace zeroshard::ctl
