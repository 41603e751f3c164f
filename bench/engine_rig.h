// A whole training cluster inside the benchmark process: S in-process
// ShardServers (127.0.0.1, port 0) and N worker threads, each wired as
// zeroshard-worker wires itself (own ShardClient, a Gloo group over an
// in-memory rendezvous store, config agreement, rank 0 Init, Barrier,
// StepEngine). Used by `zeroshard-bench step`, `netstep` and `memory`.
//
//   ASSIGN_OR_RETURN(TrainingConfig cfg, BenchConfig(shape, "bf16", 3, 1,
//                                                    2, 4, 1));
//   ASSIGN_OR_RETURN(RigRun run, RunEngineRig(cfg, sampler));
//   run.steps[0].seconds;
//
// Every wait is bounded by the config's step timeout.
#ifndef ZEROSHARD_BENCH_ENGINE_RIG_H_
#define ZEROSHARD_BENCH_ENGINE_RIG_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/shard_cluster.h"
#include "common/config.h"
#include "model/gpt_manifest.h"
#include "data/batch_sampler.h"
#include "worker/engine/step_engine.h"

namespace zeroshard::bench {

// A DeepSpeed-style config: AdamW lr 1e-3, no clipping, constant LR,
// `precision` fp32 | bf16 | fp16, ZeRO `stage`, micro batch `batch` per
// worker, gas 1, `steps` steps, S servers, N workers.
absl::StatusOr<TrainingConfig> BenchConfig(const GptShape& shape,
                                           const std::string& precision,
                                           int stage, int servers, int workers,
                                           int batch, uint64_t steps);

// The built-in corpus when present, else a fixed pseudo-random text.
absl::StatusOr<BatchSampler> BenchSampler(const TrainingConfig& config);

struct RigRun {
  std::vector<StepResult> steps;   // rank 0's
  EngineMemory max_memory;         // the largest total_peak() over ranks
};

// Called by rank 0 before each step (e.g. to arm a checkpoint), with the
// servers; an error ends the run. Called once more with step ==
// config.cluster.steps when the run ends, done or failed, before the servers'
// client goes: work a hook left running on `servers` must end in that call.
using RigStepHook =
    std::function<absl::Status(uint64_t step, const ShardCluster& servers)>;

// The servers take config.cluster.placement; the workers' model comes from
// `make_model` (the CPU model unless the device benchmark passes the CUDA
// one).
absl::StatusOr<RigRun> RunEngineRig(const TrainingConfig& config,
                                    const BatchSampler& sampler,
                                    const RigStepHook& before_step = nullptr,
                                    const ModelFactory& make_model = MakeCpuModel);

// Matrix-product FLOPs of one optimizer step (forward + backward = 3x
// forward) for `tokens` tokens of sequence length T: the linear layers
// (24 C^2 per token per block), the attention products QK^T and AV counted
// over the full T x T (4 T C per token per block, as the usual 6N + 12 L T C
// rule does), and the tied LM head (2 C V per token).
double StepMatmulFlops(const GptShape& shape, int T, double tokens);

}  // namespace zeroshard::bench

#endif  // ZEROSHARD_BENCH_ENGINE_RIG_H_
