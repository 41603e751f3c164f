#include "model/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/layout.h"
#include "common/param_groups.h"
#include "common/status_macros.h"
#include "model/arch.h"

namespace zeroshard {
namespace {

// Bytes of a parameter element on the worker (partition, gathered units).
double ParamBytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }
// Bytes of a parameter element in a Gather reply: the BF16 mirror for bf16,
// the FP32 master for fp32 and fp16 (rounded to FP16 on the worker).
double GatherBytes(Precision p) { return p == Precision::kBf16 ? 2 : 4; }
// Stored activations: BF16 for bf16 training, FP32 otherwise.
double ActBytes(Precision p) { return p == Precision::kBf16 ? 2 : 4; }

absl::Status Positive(double v, const char* name) {
  if (!std::isfinite(v) || !(v > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a positive number, got ", v));
  }
  return absl::OkStatus();
}

absl::Status Validate(const EstimateInput& in) {
  if (in.params != 0 || !in.model.has_value()) {
    if (auto s = Positive(in.params, "params (Ψ)"); !s.ok()) return s;
  }
  if (in.workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers (N) must be >= 1, got ", in.workers));
  }
  if (in.servers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("servers (S) must be >= 1, got ", in.servers));
  }
  if (in.stage < 1 || in.stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage must be 1, 2 or 3, got ", in.stage));
  }
  if (in.micro_batch < 1 || in.grad_accum < 1 || in.seq < 0 ||
      in.checkpoint_k < 1) {
    return absl::InvalidArgumentError(
        "micro_batch, grad_accum and checkpoint k must be >= 1, seq >= 0");
  }
  for (auto [v, name] : {std::pair<double, const char*>{in.link_gbps, "link_gbps"},
                         {in.mem_gbps, "mem_gbps"},
                         {in.flops, "flops"},
                         {in.server_mem_gbps, "server_mem_gbps"}}) {
    if (auto s = Positive(v, name); !s.ok()) return s;
  }
  if (!std::isfinite(in.worker_base_bytes) || in.worker_base_bytes < 0 ||
      !std::isfinite(in.server_base_bytes) || in.server_base_bytes < 0) {
    return absl::InvalidArgumentError("process base bytes must be >= 0");
  }
  if (in.model.has_value()) {
    if (auto a = model::ArchForShape(*in.model); !a.ok()) return a.status();
    if (in.seq > in.model->context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "seq ", in.seq, " exceeds the model's context ", in.model->context));
    }
  }
  return absl::OkStatus();
}

// Unit sizes (padded, elements) of the model as the workers lay it out.
struct Units {
  double total = 0;
  double largest = 0;
  double embedding = 0;
  double final_unit = 0;
  double block = 0;
  double largest_server = 0;  // elements of the largest server range
  double largest_whole = 0;   // elements of the largest tensor kept whole
};

absl::StatusOr<Units> LayoutUnits(const GptShape& shape, int n, int s,
                                  const ParamGroups& groups) {
  ASSIGN_OR_RETURN(const model::ModelArch* arch, model::ArchForShape(shape));
  auto manifest = arch->Manifest(shape, static_cast<uint32_t>(n));
  if (!manifest.ok()) return manifest.status();
  MarkWholeTensors(groups, &*manifest);
  auto layout = FlatLayout::Create(*manifest, static_cast<uint32_t>(s),
                                   static_cast<uint32_t>(n));
  if (!layout.ok()) return layout.status();
  Units u;
  u.total = static_cast<double>(layout->total_elems());
  const auto& units = layout->units();
  u.embedding = static_cast<double>(units.front().padded);
  u.final_unit = static_cast<double>(units.back().padded);
  if (units.size() > 2) u.block = static_cast<double>(units[1].padded);
  for (const UnitInfo& unit : units) {
    u.largest = std::max(u.largest, static_cast<double>(unit.padded));
  }
  for (const TensorInfo& t : layout->tensors()) {
    if (t.keep_whole) {
      u.largest_whole = std::max(u.largest_whole, static_cast<double>(t.numel));
    }
  }
  for (int k = 0; k < s; ++k) {
    u.largest_server = std::max(
        u.largest_server,
        static_cast<double>(layout->ServerRange(static_cast<uint32_t>(k)).size()));
  }
  return u;
}

// The bytes an element of a worker's partitions touches in its regions: the
// pushed gradient's, then the gathered value's (BF16 under bf16; FP32
// under fp16 and fp32, as the engine fetches them).
double RegionBytesPerElement(const EstimateInput& in) {
  const double push = in.grad_wire == CommDataType::kBf16 ? 2 : 4;
  const double gather = in.precision == Precision::kBf16 ? 2 : 4;
  return push + gather;
}

ProcessEstimate WorkerAt(const EstimateInput& in, double psi, int stage,
                         const std::optional<Units>& units,
                         const ActivationEstimate& act) {
  const double n = in.workers, p = ParamBytes(in.precision);
  ProcessEstimate w;
  const char* part = p == 2 ? "2Ψ/N" : "4Ψ/N";
  w.terms.push_back({absl::StrCat("partition (", PrecisionName(in.precision), ")"),
                     part, p * psi / n});
  w.terms.push_back({"FP32 gradient shard", "4Ψ/N", 4 * psi / n});
  if (in.grad_wire == CommDataType::kBf16) {
    w.terms.push_back({"BF16 push copy", "2Ψ/N", 2 * psi / n});
  }
  if (in.precision == Precision::kFp16) {
    w.terms.push_back({"FP32 fetch buffer (fp16)", "4Ψ/N", 4 * psi / n});
  }
  if (in.shared_memory) {
    const double r = RegionBytesPerElement(in);
    w.terms.push_back({"shared-memory regions (push and gather areas)",
                       absl::StrCat(r, "Ψ/N"), r * psi / n});
  }
  if (stage < 3 && in.workers > 1) {
    w.terms.push_back({"every unit gathered", p == 2 ? "2Ψ" : "4Ψ", p * psi});
  }
  if (stage == 1) {
    w.terms.push_back({"every unit's FP32 gradient", "4Ψ", 4 * psi});
  }
  w.model_state_terms = static_cast<int>(w.terms.size());
  if (units.has_value() && n > 1) {
    if (stage == 3) {
      // UnitCache: the unit computing, the one prefetched, <= 2 spares kept
      // for reuse; the head needs the embedding (tied wte) beside them.
      w.terms.push_back({"gathered units (ZeRO-3)", "4 units + embedding",
                         p * (units->embedding + 4 * units->largest)});
    }
    if (stage >= 2) {
      // StepEngine::UnitGradBuffer: a unit's FP32 gradient lives until its
      // reduce-scatter ran on the comm thread; at the head, final and
      // embedding at once, then about two blocks in flight.
      w.terms.push_back({"full-unit FP32 gradients", "≈ 2 units",
                         4 * (units->embedding + units->final_unit +
                              units->block)});
    }
  }
  if (units.has_value() && n > 1) {
    // GlooWorkerGroup::ReduceScatter: two running sums and a receive buffer
    // of the largest unit's part, FP32, zero-filled on first use and kept.
    w.terms.push_back({"Gloo reduce-scatter buffers", "3 · 4·|u|/N",
                       3 * 4 * units->largest / n});
  }
  if (act.known) {
    w.terms.push_back({"activations (policy)", "see activations", act.chosen});
    w.terms.push_back({"kernel scratch (FP32)", "≈ 17·b·T·C·4 + logits",
                       act.scratch});
    if (in.bf16_gemm_widened && act.widened_operands > 0) {
      w.terms.push_back({"BF16 operands widened (no AVX-512)",
                         "≈ 4·M·max(4C,V) + 4·max(4MC,4C²,VC)",
                         act.widened_operands});
    }
  }
  w.terms.push_back({"process base", "measured", in.worker_base_bytes});
  return w;
}

// `owned`: the elements the server holds (Ψ/S, or the largest server's
// range, `owned_name`).
ProcessEstimate ServerEstimate(const EstimateInput& in, double owned,
                               const std::string& owned_name,
                               double largest_whole) {
  ProcessEstimate v;
  const std::string& o = owned_name;
  v.terms.push_back({"FP32 master weights", "4" + o, 4 * owned});
  // The optimizer's state slots, as its rule declares them (AdamW: m, v).
  std::string slots;
  for (const StateSlot& slot : OptimizerStateSlots(in.optimizer, in.optimizer_rule)) {
    absl::StrAppend(&slots, slots.empty() ? "" : ", ", slot.name);
  }
  // 8-bit slots: a code byte an element and a 4-byte scale per 2048.
  const double k = OptimizerStateBytesPerElement(in.optimizer, in.optimizer_rule);
  v.terms.push_back({absl::StrCat("optimizer state (", slots,
                                  IsEightBit(in.optimizer) ? ", 8-bit" : "", ")"),
                     absl::StrCat(absl::SixDigits(k), o), k * owned});
  v.terms.push_back({"BF16 mirror", "2" + o, 2 * owned});
  v.model_state_terms = 3;
  if (in.grad_wire == CommDataType::kBf16) {
    v.terms.push_back({"buffered gradients (one step, BF16)", "2" + o, 2 * owned});
  } else {
    v.terms.push_back({"buffered gradients (one step, FP32)", "4" + o, 4 * owned});
  }
  if (in.shared_memory) {
    const double r = RegionBytesPerElement(in);
    v.terms.push_back({"shared-memory regions with the workers",
                       absl::StrCat(r, o), r * owned});
  }
  if (largest_whole > 0) {
    // A whole-tensor update (server/shard_store.h UpdateWholeRange): copies
    // of the tensor's master and slots, its assembled FP32 gradient, and
    // the rule's own scratch (Adafactor's scaled gradient and update;
    // Muon's update and Newton-Schulz buffers, about as much).
    const double per = 4.0 * (1 + OptimizerStateSlots(in.optimizer, in.optimizer_rule).size()) + 12;
    v.terms.push_back({"whole-tensor update scratch",
                       absl::StrCat(per, "·Tmax"), per * largest_whole});
  }
  // Gather replies queued and PushGrad pieces being read, per worker's
  // connection (HTTP/2 windows grow to a few MiB): an allowance fitted to
  // the measured runs, not counted from the code.
  v.terms.push_back({"gRPC transport buffers", "≈ 6 MiB · N",
                     kServerGrpcBytesPerWorker * in.workers});
  v.terms.push_back({"process base", "measured", in.server_base_bytes});
  return v;
}

}  // namespace

double ProcessEstimate::model_state_bytes() const {
  double b = 0;
  for (int i = 0; i < model_state_terms && i < static_cast<int>(terms.size()); ++i) {
    b += terms[i].bytes;
  }
  return b;
}

double ProcessEstimate::total() const {
  double b = 0;
  for (const EstimateTerm& t : terms) b += t.bytes;
  return b;
}

void CombineActivationPolicy(double layers, double dx, CheckpointPolicy policy,
                             int k, ActivationEstimate* a) {
  // None: every input and every block's internals at the end of forward,
  // then the gradient and the next block's input gradient in backward.
  a->none = layers * (a->per_block_internals + a->block_input) + 2 * dx + a->block_input;
  // Per block: every input kept; one block's internals (forward, or the
  // recompute before its backward) plus its recomputed output.
  a->every_block = (layers + 1) * a->block_input + a->per_block_internals +
                   a->block_input + 2 * dx;
  switch (policy) {
    case CheckpointPolicy::kNone: a->chosen = a->none; break;
    case CheckpointPolicy::kEveryBlock: a->chosen = a->every_block; break;
    case CheckpointPolicy::kEveryK: {
      const double kk = std::min<double>(k, layers);
      const double kept = std::ceil(layers / kk) + 1;
      a->chosen = (kept + kk) * a->block_input + kk * a->per_block_internals + 2 * dx;
      break;
    }
  }
  a->chosen = std::min(a->chosen, a->none);
}

ActivationEstimate EstimateActivations(const ModelShape& shape, int micro_batch,
                                       int seq, Precision precision,
                                       CheckpointPolicy policy, int k,
                                       bool online_attention) {
  ActivationEstimate a;
  a.known = true;
  const double b = micro_batch, t = seq > 0 ? seq : shape.context;
  const double c = shape.width, h = shape.heads, v = shape.vocab;
  const double layers = shape.layers, m = b * t, s = ActBytes(precision);
  // model/gpt_block.cc BlockActs: ln1, atty, x2, ln2 (MC each), qkv
  // (3MC), h (4MC), probs (B·H·T²) in the compute dtype; mean/rstd of both
  // LayerNorms in FP32. Online attention (model/cuda/device_block.h)
  // keeps lse (B·H·T, FP32) in place of probs.
  const double attention = online_attention ? b * h * t * 4 : b * h * t * t * s;
  a.per_block_internals = 11 * m * c * s + attention + 4 * m * 4;
  a.block_input = m * c * s;
  const double dx = m * c * 4;  // FP32 gradient of the residual stream
  CombineActivationPolicy(layers, dx, policy, k, &a);
  // Thread-local FP32 scratch of gpt_block.cc (slots: MC, MC, 4MC, 4MC, 4MC,
  // 3MC), the transient GELU copy (4MC in the compute dtype), linear.cc's
  // BF16 dy (4MC) and the head's x, ln_f and logits (FP32).
  a.scratch = 17 * m * c * 4 + 4 * m * c * s + 4 * m * c * 2 +
              (2 * m * c + m * v) * 4;
  // Widened operands (gemm.cc's wide_a, wide_b): A is at most an activation
  // [M, 4C] or the head's dlogits [M, V]; B a weight [C, 4C], the tied
  // embedding [V, C] or an activation [M, 4C] (weight gradients), FP32.
  if (precision == Precision::kBf16) {
    a.widened_operands = 4 * m * std::max(4 * c, v) +
                         4 * std::max({4 * m * c, 4 * c * c, v * c});
  }
  return a;
}

absl::StatusOr<MemoryEstimate> EstimateMemory(const EstimateInput& input) {
  if (auto s = Validate(input); !s.ok()) return s;
  MemoryEstimate e;
  e.input = input;
  std::optional<Units> units;
  if (input.model.has_value()) {
    auto u = LayoutUnits(*input.model, input.workers, input.servers,
                         input.param_groups);
    if (!u.ok()) return u.status();
    units = *u;
  }
  const double psi = input.params > 0 ? input.params : units->total;
  e.params = psi;
  const double n = input.workers, s = input.servers;

  // The ZeRO paper (Rajbhandari et al., SC'20, Fig. 1), K = 12.
  e.zero[0] = {"DDP", "16Ψ", 16 * psi, 0};
  e.zero[1] = {"ZeRO-1", "4Ψ + 12Ψ/N", 4 * psi + 12 * psi / n, 0};
  e.zero[2] = {"ZeRO-2", "2Ψ + 14Ψ/N", 2 * psi + 14 * psi / n, 0};
  e.zero[3] = {"ZeRO-3", "16Ψ/N", 16 * psi / n, 0};
  for (ZeroStageBytes& z : e.zero) z.cluster_bytes = z.per_gpu_bytes * n;
  e.zero1_note =
      "ZeRO-1 partitions only the optimizer states (12Ψ), so it is "
      "4Ψ + 12Ψ/N, not 16Ψ (Rajbhandari et al., ZeRO, SC'20, Fig. 1)";

  const int seq = input.seq > 0 ? input.seq
                                : (input.model ? input.model->context : 1024);
  if (input.model.has_value()) {
    ASSIGN_OR_RETURN(const model::ModelArch* arch,
                     model::ArchForShape(*input.model));
    e.activations = arch->EstimateActivations(
        *input.model, input.micro_batch, seq, input.precision,
        input.checkpointing, input.checkpoint_k, input.online_attention);
  }
  // The largest server: Ψ/S, unless tensors kept whole moved the
  // boundaries (a shape given, not a bare Ψ).
  e.largest_server_params = psi / s;
  std::string owned_name = "Ψ/S";
  bool whole = false;
  if (!input.param_groups.single) {
    for (const GroupSettings& g : input.param_groups.classes) {
      whole = whole || g.rule.active();
    }
  }
  if (whole && units.has_value() && input.params <= 0) {
    e.largest_server_params = units->largest_server;
    owned_name = "Ψmax";
  }
  if (whole && units.has_value()) e.largest_whole_tensor = units->largest_whole;
  // With replicas a server keeps R slots: its own and the copy of the one
  // before it.
  const double r = input.replicas;
  const std::string held =
      input.replicas > 1 ? absl::StrCat("·", input.replicas, owned_name)
                         : owned_name;
  for (int stage = 1; stage <= 3; ++stage) {
    e.worker[stage - 1] = WorkerAt(input, psi, stage, units, e.activations);
    e.server[stage - 1] = ServerEstimate(input, r * e.largest_server_params,
                                         held, e.largest_whole_tensor);
  }

  // Wire, per optimizer step.
  WireEstimate& w = e.wire;
  const double p = ParamBytes(input.precision);
  const double g = input.grad_wire == CommDataType::kBf16 ? 2 : 4;
  const double gas = input.grad_accum;
  w.gather_per_worker = GatherBytes(input.precision) * psi / n;
  w.push_per_worker = r * g * psi / n;
  w.per_server_out = GatherBytes(input.precision) * psi / s;
  w.per_server_in = r * g * psi / s;
  if (input.workers > 1) {
    w.allgathers_per_step = input.stage == 3 ? static_cast<int>(2 * gas) : 1;
    w.reduce_scatters_per_step = input.stage == 1 ? 1 : static_cast<int>(gas);
    const double ring = (n - 1) / n;
    w.allgather_per_worker = w.allgathers_per_step * p * psi * ring;
    w.reduce_scatter_per_worker = w.reduce_scatters_per_step * 4 * psi * ring;
  }

  // Step time, per optimizer step of one worker.
  StepTimeEstimate& st = e.time;
  const double tokens = input.micro_batch * static_cast<double>(seq) * gas;
  const bool recompute = input.checkpointing != CheckpointPolicy::kNone;
  double attn = 0, block_params = psi;
  if (input.model.has_value()) {
    const ModelShape& m = *input.model;
    attn = 2.0 * m.layers * seq * m.width;  // Kaplan et al.: QKᵀ and AV
    // The blocks' parameters, the ones a recompute multiplies again: all
    // but the embedding and final units of the architecture's manifest.
    absl::StatusOr<const model::ModelArch*> arch = model::ArchForShape(m);
    absl::StatusOr<ModelManifest> manifest =
        arch.ok() ? (*arch)->Manifest(m, 1) : absl::StatusOr<ModelManifest>(arch.status());
    if (manifest.ok()) {
      block_params = 0;
      for (size_t u = 1; u + 1 < manifest->units.size(); ++u) {
        for (const TensorSpec& t : manifest->units[u].tensors) {
          double n = 1;
          for (int64_t d : t.shape) n *= static_cast<double>(d);
          block_params += n;
        }
      }
    }
  }
  const double fwd = 2 * psi + attn;
  st.flops_per_worker =
      tokens * (3 * fwd + (recompute ? 2 * block_params + attn : 0));
  st.compute_s = st.flops_per_worker / input.flops;
  double act_traffic = 0;
  if (e.activations.known) {
    const double written =
        input.model->layers *
        (e.activations.per_block_internals + e.activations.block_input);
    act_traffic = 2 * written * (recompute ? 2 : 1);
  }
  const double param_reads = (2 + (recompute ? 1 : 0)) * p * psi;
  st.memory_bytes = gas * (param_reads + 8 * psi + act_traffic);
  st.memory_s = st.memory_bytes / (input.mem_gbps * 1e9);
  const double link = input.link_gbps * 1e9 / 8;
  st.worker_link_s = std::max(w.worker_sent(), w.worker_received()) / link;
  st.server_link_s = std::max(w.per_server_out, w.per_server_in) / link;
  // The rule per element: read and write the master and its state slots
  // (AdamW's m and v: 24 B; Lion's m: 16 B; 8-bit Adam's codes and scales:
  // about 12 B), read the gradient, write the mirror.
  const double rw = 2.0 * (4 + OptimizerStateBytesPerElement(input.optimizer, input.optimizer_rule));
  st.optimizer_s = r * (rw + g + 2) * psi / s / (input.server_mem_gbps * 1e9);
  st.serial_s = st.compute_s + st.memory_s +
                std::max(st.worker_link_s, st.server_link_s) + st.optimizer_s;
  st.overlapped_s = std::max({st.compute_s, st.memory_s, st.worker_link_s,
                              st.server_link_s, st.optimizer_s});
  return e;
}

bool CpuWidensBf16Gemm() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return !(__builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq"));
#else
  return true;
#endif
}

}  // namespace zeroshard
