// Memory, wire and step-time estimates: the ZeRO paper's per-GPU model-state
// formulas (DDP, ZeRO-1/2/3) and zeroshard's own split of that state between
// workers and shard servers, plus activations, bytes on the wire and a
// step-time model. Pure arithmetic: no I/O, no gRPC. `zeroshard-ctl
// estimate` prints it; docs/DESIGN.md "The estimator" explains the model.
//
//   EstimateInput in;
//   in.params = 7e9; in.workers = 8; in.servers = 4;      // Ψ, N, S
//   in.model = ModelShape{...}; in.micro_batch = 8;       // optional
//   ASSIGN_OR_RETURN(MemoryEstimate e, EstimateMemory(in));
//   e.zero[1].per_gpu_bytes;        // ZeRO-1: 4Ψ + 12Ψ/N
//   e.worker[2].total();            // a zeroshard worker under ZeRO-3
//
// Contracts:
// - Mixed-precision Adam as in the ZeRO paper: K = 12 bytes of optimizer
//   state per parameter (FP32 master, m, v), 2-byte parameters and
//   gradients. So DDP 16Ψ, ZeRO-1 4Ψ + 12Ψ/N, ZeRO-2 2Ψ + 14Ψ/N, ZeRO-3
//   16Ψ/N, per GPU, whatever `precision` is (the paper's figures).
// - The zeroshard split follows the code (docs/DESIGN.md "Where every byte
//   lives"): worker = partition (2Ψ/N bf16/fp16, 4Ψ/N fp32) + FP32 grad
//   shard 4Ψ/N (+ 2Ψ/N BF16 push copy) + gathered units + unit gradient
//   buffers + Gloo's reduce-scatter buffers + activations + kernel scratch
//   + a fixed process base; server = 14Ψ/S
//   (FP32 master, m, v, BF16 mirror) + one step of pushed gradients (4Ψ/S,
//   2Ψ/S in BF16) + gRPC transport buffers (6 MiB per worker) + a fixed
//   base. Ψ is padded like FlatLayout when a model shape is given. With a
//   shape, Ψ/S is the largest server's range: tensors a parameter group's
//   rule keeps whole (param_groups, MarkWholeTensors) move the boundaries.
// - Bytes and seconds are doubles; nothing is rounded.
// - EstimateMemory returns INVALID_ARGUMENT naming the field for a bad input
//   (Ψ <= 0 or not finite, N or S < 1, stage not 1..3, bandwidths or FLOP/s
//   <= 0, a bad model shape, micro batch < 1).
#ifndef ZEROSHARD_MODEL_MEMORY_ESTIMATE_H_
#define ZEROSHARD_MODEL_MEMORY_ESTIMATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "common/model_shape.h"

namespace zeroshard {

// Fixed resident memory of a process before any model state: the binary,
// its shared libraries (gRPC, OpenSSL, oneDNN, OpenMP, Gloo), thread stacks,
// allocator arenas and (worker) the built-in corpus. Measured as the peak RSS
// (VmHWM) of real zeroshard-train processes with a 2-layer, width-128 model
// (state < 4 MiB) on this project's Debian 12 Release build: servers 22.5 to
// 22.9 MiB, workers 37.4 to 38.5 MiB, less that model's own terms.
// docs/DESIGN.md "The estimator"; tests/integration/estimate_test.cc checks
// the whole estimate against real runs.
inline constexpr double kServerBaseBytes = 20.0 * 1048576;
inline constexpr double kWorkerBaseBytes = 36.0 * 1048576;
// A server's gRPC transport buffers per connected worker (queued Gather
// replies, PushGrad messages being read): fitted to the 12.8 M and 57.1 M
// parameter runs, where servers held 6 to 18 MiB above their state and base
// with 2 workers: the middle of that range (4 MiB, its low end, left the
// 12.8 M run's 8-bit servers up to 10.5 % above the estimate, one CI run in
// about eight).
inline constexpr double kServerGrpcBytesPerWorker = 6.0 * 1048576;

struct EstimateInput {
  double params = 0;  // Ψ, elements (taken from `model` when <= 0)
  int workers = 1;    // N
  int servers = 1;    // S
  // Copies of each server's slot (zeroshard.replicas, 1 or 2): a server
  // holds R slots' state, each worker pushes its gradient to R servers,
  // and every update runs R times.
  int replicas = 1;
  int stage = 3;      // this run's ZeRO stage (1, 2, 3)
  Precision precision = Precision::kBf16;
  CommDataType grad_wire = CommDataType::kFp32;  // communication_data_type
  // The servers' update rule: its state slots (OptimizerStateSlots) size the
  // server's optimizer state. The ZeRO-paper rows keep the paper's K = 12.
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  std::string optimizer_rule;  // kRule: the registered rule's name
  // The classes' rules (Muon, Adafactor) keep their tensors whole on one
  // server; with `model`, the server rows are for the largest server.
  ParamGroups param_groups;
  // The model's shape, for activations, unit sizes and FLOPs; without it
  // the unit working set and activations are left out (reported as 0).
  std::optional<ModelShape> model;
  int micro_batch = 1;      // sequences per micro-batch per worker
  int seq = 0;              // tokens per sequence (0: the model's context)
  int grad_accum = 1;       // micro-batches per optimizer step
  CheckpointPolicy checkpointing = CheckpointPolicy::kNone;
  int checkpoint_k = 1;     // kEveryK segment length
  // The GPU worker's --attention=online or flash: each block saves its rows'
  // log-sum-exp (B·H·T, FP32) instead of the probabilities (B·H·T², compute
  // dtype) and recomputes them in backward.
  bool online_attention = false;
  // The servers share the workers' host and zeroshard.shared_memory is on
  // (zeroshard-train's embedded cluster): each worker pushes and gathers
  // its partitions through a shared-memory region with each server, whose
  // touched pages count in both processes' resident memory: the pushed
  // gradient's bytes plus the gathered values' bytes (BF16 under bf16,
  // FP32 otherwise) per element of the partitions (server: of its range).
  bool shared_memory = false;
  // Step-time model (per worker unless named).
  double link_gbps = 100;        // network, Gbit/s each direction
  double mem_gbps = 2000;        // accelerator memory bandwidth, GB/s
  double flops = 312e12;         // accelerator FLOP/s (BF16 dense)
  double server_mem_gbps = 50;   // a shard server's DRAM bandwidth, GB/s
  double worker_base_bytes = kWorkerBaseBytes;
  double server_base_bytes = kServerBaseBytes;
  // The workers' CPU has no BF16 matrix product (no AVX-512): BF16 operands
  // are widened to FP32 scratch (CpuWidensBf16Gemm() tells for this CPU).
  bool bf16_gemm_widened = false;
};

// Whether this CPU lacks what oneDNN's BF16 matmul needs (AVX-512 F, BW, VL,
// DQ: its avx512_core), so the CPU worker widens BF16 products to FP32.
bool CpuWidensBf16Gemm();

// One line of a breakdown.
struct EstimateTerm {
  std::string name;     // "FP32 gradient shard"
  std::string formula;  // "4Ψ/N"
  double bytes = 0;
};

// The ZeRO paper's per-GPU model states for one scheme.
struct ZeroStageBytes {
  std::string scheme;   // "DDP", "ZeRO-1", ...
  std::string formula;  // "4Ψ + 12Ψ/N"
  double per_gpu_bytes = 0;
  double cluster_bytes = 0;  // N × per GPU
};

// A zeroshard process under one stage: model state plus working set.
struct ProcessEstimate {
  std::vector<EstimateTerm> terms;
  double model_state_bytes() const;  // terms marked as model state
  double total() const;              // every term, base included
  int model_state_terms = 0;         // the first k terms are model state
};

struct ActivationEstimate {
  bool known = false;          // a model shape was given
  double per_block_internals = 0;  // one block's saved internals
  double block_input = 0;          // one block's input x_l
  double none = 0;             // peak, policy none
  double every_block = 0;      // peak, per-block checkpointing
  double chosen = 0;           // peak under the input's policy
  double scratch = 0;          // FP32 scratch of the kernels (grow-only)
  // BF16 products on a CPU without AVX-512 widen both operands to FP32 first
  // (model/kernels/cpu/gemm.h): the largest A and B, grow-only.
  double widened_operands = 0;
};

struct WireEstimate {
  // Per optimizer step, bytes.
  double gather_per_worker = 0;       // from the servers: its partition
  double push_per_worker = 0;         // to the servers: its grad shard
  double allgather_per_worker = 0;    // received (= sent) among workers
  double reduce_scatter_per_worker = 0;  // sent (= received) among workers
  double per_server_out = 0;          // Gather replies
  double per_server_in = 0;           // PushGrad pieces
  int allgathers_per_step = 0;        // full passes over the model
  int reduce_scatters_per_step = 0;
  double worker_sent() const {
    return push_per_worker + allgather_per_worker + reduce_scatter_per_worker;
  }
  double worker_received() const {
    return gather_per_worker + allgather_per_worker + reduce_scatter_per_worker;
  }
};

struct StepTimeEstimate {
  double flops_per_worker = 0;   // incl. recompute
  double compute_s = 0;          // flops / FLOP/s
  double memory_bytes = 0;       // accelerator memory traffic per worker
  double memory_s = 0;
  double worker_link_s = 0;      // max(sent, received) / link
  double server_link_s = 0;
  double optimizer_s = 0;        // AdamW over Ψ/S on a server
  double serial_s = 0;           // sum: nothing overlaps
  double overlapped_s = 0;       // max: perfect overlap
};

struct MemoryEstimate {
  EstimateInput input;
  double params = 0;  // Ψ used (padded when from a shape)
  // Elements the largest server owns: Ψ/S, or more where whole tensors move
  // the boundaries (a model shape given).
  double largest_server_params = 0;
  // Elements of the largest tensor a rule keeps whole (0: none, or no model
  // shape): its update's scratch is a server row.
  double largest_whole_tensor = 0;
  ZeroStageBytes zero[4];          // DDP, ZeRO-1, ZeRO-2, ZeRO-3
  ProcessEstimate worker[3];       // zeroshard stage 1, 2, 3
  ProcessEstimate server[3];
  ActivationEstimate activations;
  WireEstimate wire;               // for input.stage
  StepTimeEstimate time;           // for input.stage
  // Why ZeRO-1 is 4Ψ + 12Ψ/N (tables that copy DDP's 16Ψ for it are
  // common).
  std::string zero1_note;
};

absl::StatusOr<MemoryEstimate> EstimateMemory(const EstimateInput& input);

// The peaks of each checkpoint policy (none, every_block, chosen) from one
// block's internals and input (set in `a`), the layers and the FP32
// gradient of the residual stream (dx bytes): the bookkeeping of
// model/decoder_model.h, shared by the architectures' estimates.
void CombineActivationPolicy(double layers, double dx, CheckpointPolicy policy,
                             int k, ActivationEstimate* a);

// GPT-2's activation peak on one worker (the "gpt2" ModelArch's; exposed for
// tests): the bytes GptModel::memory() (DeviceGptModel's, with online
// attention) tracks plus the kernels' FP32 scratch. EstimateMemory asks the
// shape's architecture (model/arch.h).
ActivationEstimate EstimateActivations(const ModelShape& shape, int micro_batch,
                                       int seq, Precision precision,
                                       CheckpointPolicy policy, int k,
                                       bool online_attention = false);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_MEMORY_ESTIMATE_H_
