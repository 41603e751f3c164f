// StepEngine: one worker's ZeRO training step (docs/DESIGN.md, "One
// training step").
//
//   1. Fetch: the worker's 1/N partition of every unit from the shard servers
//      at version `step` (BF16 on the wire for bf16 training, FP32 for fp32
//      and fp16; fp16 is rounded on the worker).
//   2. Forward, unit by unit: all-gather the unit among the workers (the next
//      unit is prefetched on the CommQueue while this one computes), compute,
//      free it (ZeRO-3). ZeRO-1/2 all-gather every unit once per step and keep
//      them.
//   3. Backward in reverse: re-gather, recompute where the checkpointing
//      policy dropped activations, backward, then reduce-scatter the unit's
//      FP32 gradient so that this worker keeps its part, accumulated over the
//      gradient_accumulation_steps micro-batches (ZeRO-2/3: per unit, as soon
//      as it is computed; ZeRO-1: full gradients stay on the worker until the
//      last micro-batch, then one reduce-scatter per unit).
//   4. During the last micro-batch's backward each unit's finished gradient
//      part is streamed to the servers that own it (one PushGrad stream per
//      server, opened at the start of that backward), in FP32 or, with
//      communication_data_type bf16, rounded to BF16. One worker skips the
//      identity all-gather and reduce-scatter: units are read from its
//      partition and gradients accumulate in its shard.
//   5. One all-reduce of (sum of squares, loss) gives the global norm and the
//      overflow flag; the coefficient 1/(loss_scale*N*gas) * clip factor
//      and the skip flag commit the push. The loss scaler (fp16) updates.
//   6. Unless this was the config's last step, the next step's fetch starts
//      on the comm queue as soon as the commit is sent, so it overlaps the
//      servers' update; a failed commit cancels it.
//
// Where the model computes in its own memory (the CUDA model,
// UnitModel::memory_space()) and the group can reach it (NCCL on device
// buffers, or one worker), the full units, the partition's copy and the
// full-unit gradients live there: a unit is gathered device to device, the
// gradient is reduce-scattered there and only this worker's part comes back
// to the host, after a fence on the model's work (docs/DESIGN.md, "The GPU
// path"). Otherwise everything is host memory and a device model copies
// what it uses.
//
// Every rank runs the same schedule, so collectives line up. Errors from the
// servers, the group or the model end the step with a status naming the
// unit, server or peer; the push is aborted so nothing of the step applies
// (unless some servers already committed, which the next step's version
// check then reports).
//
//   ASSIGN_OR_RETURN(auto engine, StepEngine::Create(cfg, rank, client, group,
//                                                    sampler));
//   ASSIGN_OR_RETURN(uint64_t step, engine->StartStep());
//   for (; step < cfg.cluster.steps; ++step) {
//     ASSIGN_OR_RETURN(StepResult r, engine->Step(step));
//   }
#ifndef ZEROSHARD_WORKER_ENGINE_STEP_ENGINE_H_
#define ZEROSHARD_WORKER_ENGINE_STEP_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/shard_cluster.h"
#include "comm/collectives.h"
#include "common/config.h"
#include "common/layout.h"
#include "common/loss_scaler.h"
#include "data/batch_sampler.h"
#include "worker/engine/comm_queue.h"
#include "worker/engine/grad_shard.h"
#include "worker/engine/unit_cache.h"
#include "model/unit_model.h"
#include "step/step_protocol.h"

namespace zeroshard {

struct StepResult {
  uint64_t step = 0;
  double loss = 0;         // mean over the global batch
  double grad_norm = 0;    // global L2 norm of the averaged, unscaled grads
  double clip_factor = 1;
  double loss_scale = 1;   // the scale this step's backward used
  double lr = 0;           // learning rate the servers apply (if not skipped)
  bool skipped = false;    // overflow: no update
  uint64_t tokens = 0;     // tokens of the global batch
  double seconds = 0;
  // Breakdown (this worker).
  double fetch_seconds = 0;
  double compute_seconds = 0;
  double comm_wait_seconds = 0;
  double commit_seconds = 0;
};

// Bytes of model state this worker holds (not activations).
struct EngineMemory {
  uint64_t partition_bytes = 0;       // its 1/N of the params
  uint64_t grad_shard_bytes = 0;      // its 1/N of the FP32 grads
  uint64_t unit_params_peak = 0;      // full units gathered at once (peak)
  uint64_t unit_grads_peak = 0;       // full-unit FP32 grad buffers (peak)
  uint64_t push_buffer_bytes = 0;     // BF16 wire copy of the grad shard
  uint64_t total_peak() const {
    return partition_bytes + grad_shard_bytes + unit_params_peak +
           unit_grads_peak + push_buffer_bytes;
  }
};

// What the engine uses of the training configuration (StepEngineConfig::
// From picks it out of a resolved TrainingConfig).
struct StepEngineConfig {
  GptShape model;
  model::CheckpointPolicy checkpointing;
  Precision precision = Precision::kBf16;
  CommDataType communication_data_type = CommDataType::kFp32;
  int stage = 3;
  int micro_batch_size = 0;
  int gradient_accumulation_steps = 0;
  int train_batch_size = 0;
  double gradient_clipping = 0;
  LossScalerOptions loss_scaler;
  OptimizerConfig optimizer;  // the learning rate each step reports
  uint64_t steps = 0;         // the run's last step + 1 (no prefetch past it)
  double step_timeout_s = 0;
  // zeroshard.shared_memory: push and gather the rank's partitions through
  // a shared-memory region with each server on this host.
  bool shared_memory = false;

  static StepEngineConfig From(const TrainingConfig& config);
};

// Makes the model the engine drives; the default makes the shape's
// architecture's CPU model (model/arch.h). The worker passes one that makes
// the CUDA model for --device=cuda:K (the engine itself does not depend on
// CUDA).
using ModelFactory =
    std::function<absl::StatusOr<std::unique_ptr<model::UnitModel>>(
        const FlatLayout& layout, const GptShape& shape, DType param_dtype,
        const model::CheckpointPolicy& policy)>;

// The CPU model of the shape's architecture (ModelArch::MakeCpuModel).
absl::StatusOr<std::unique_ptr<model::UnitModel>> MakeCpuModel(
    const FlatLayout& layout, const GptShape& shape, DType param_dtype,
    const model::CheckpointPolicy& policy);

class StepEngine {
 public:
  // `layout` must be FlatLayout::Create(arch->Manifest(model, N), S, N) for
  // the configuration's model and its architecture.
  // The pointers must outlive the engine.
  static absl::StatusOr<std::unique_ptr<StepEngine>> Create(
      const StepEngineConfig& config, const FlatLayout* layout, int rank,
      ShardCluster* client, WorkerGroup* group, const BatchSampler* sampler,
      const ModelFactory& make_model = MakeCpuModel);
  static absl::StatusOr<std::unique_ptr<StepEngine>> Create(
      const TrainingConfig& config, const FlatLayout* layout, int rank,
      ShardCluster* client, WorkerGroup* group, const BatchSampler* sampler,
      const ModelFactory& make_model = MakeCpuModel) {
    return Create(StepEngineConfig::From(config), layout, rank, client, group,
                  sampler, make_model);
  }
  ~StepEngine();

  // The step to run next: the servers' lowest chunk version (agreed among
  // workers), so a restarted run continues where the servers are.
  absl::StatusOr<uint64_t> StartStep();

  // Runs optimizer step `step` (all micro-batches, push, commit).
  absl::StatusOr<StepResult> Step(uint64_t step);

  // Validation loss of the parameters at `version` (after Step(s) returns,
  // version s + 1 is the updated model): forward only over `batches`
  // micro-batches of micro_batch_size samples per worker from `sampler`
  // (its step 0, micro-steps 0..batches-1: the same fixed samples at every
  // call), mean over all workers' batches (one all-reduce). Every rank must
  // call it at the same point. Reuses the fetch the last Step started for
  // `version`, and the next Step(version) reuses this fetch.
  absl::StatusOr<double> EvalLoss(uint64_t version, const BatchSampler& sampler,
                                  int batches);

  // Rank 0 calls `hook(step + 1, loss-scaler state for step + 1)` after
  // every worker prepared step `step` and before applying it: the state a
  // successor starting at step + 1 needs (worker/engine/resume.h).
  void SetBeforeApply(
      std::function<absl::Status(uint64_t, const LossScalerState&)> hook) {
    before_apply_ = std::move(hook);
  }

  // Test hook (rank 0): at `step`, ApplyStep reaches server 0 only and the
  // step fails with ABORTED, as if rank 0 died half way through the second
  // phase; the launcher must finish the step.
  void InjectPartialApplyAt(uint64_t step) { inject_partial_apply_step_ = step; }

  // Test hook: makes this worker's gradient non-finite at `step`, as an FP16
  // overflow would (the step must then be skipped and the scale back off).
  void InjectOverflowAt(uint64_t step) { inject_overflow_step_ = step; }

  const EngineMemory& memory() const { return memory_; }
  const model::UnitModel& model() const { return *model_; }
  // Whether units and gradients live in the model's memory (see above).
  bool units_in_model_memory() const { return mem_ != nullptr; }
  // Servers reached through shared memory (StepEngineConfig::shared_memory).
  int shared_memory_servers() const { return shared_memory_servers_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  // Resumes the loss scaler (from a checkpoint, or the state the previous
  // incarnation of rank 0 left in the key-value store); every rank must
  // restore the same state.
  absl::Status RestoreLossScaler(const LossScalerState& state) {
    return scaler_.Restore(state);
  }
  // This worker's FP32 gradient partition from the last step (tests).
  absl::Span<const float> grad_shard() const { return grads_->partition(); }

 private:
  StepEngine(const StepEngineConfig& config, const FlatLayout* layout, int rank,
             ShardCluster* client, WorkerGroup* group,
             const BatchSampler* sampler, LossScaler scaler);

  // Fetches this worker's partition at version `step` into the cache
  // (cancellable through prefetch_cancel_).
  absl::Status Fetch(uint64_t step);
  // Cancels a fetch started ahead for the next step and waits for it.
  void CancelPrefetch();
  absl::Status MicroBatch(uint64_t step, int micro, bool last,
                          PushSession* push, double* loss);
  // Forward through the embedding unit and every block, each gathered,
  // used and released in turn, prefetching the next (the last block
  // prefetches the final unit). After model_->Begin; training and validation.
  absl::Status ForwardBlocks();
  int NextBackwardUnit(int l) const;

  const StepEngineConfig config_;
  const FlatLayout* layout_;
  const int rank_;
  const int world_;
  ShardCluster* client_;
  WorkerGroup* group_;
  const BatchSampler* sampler_;
  LossScaler scaler_;
  const DType param_dtype_;
  const DType wire_dtype_;
  const int stage_;
  // The model's memory when units and gradients live there; null: host.
  model::ModelMemory* mem_ = nullptr;
  int shared_memory_servers_ = 0;
  CommQueue queue_;
  // The next step's fetch, started when this step's commit was sent:
  // its step (-1: none), its ticket on queue_, and its canceller.
  int64_t prefetched_step_ = -1;
  // The version the partition holds after EvalLoss fetched it (-1: none).
  int64_t fetched_step_ = -1;
  CommTicket prefetch_;
  CallCanceller prefetch_cancel_;
  std::unique_ptr<UnitCache> cache_;
  std::unique_ptr<model::UnitModel> model_;
  // The gradient side (after model_: its model-memory buffers go first).
  std::unique_ptr<GradShard> grads_;
  // The step's protocol among the ranks and with the servers (set by Create).
  std::optional<StepProtocol> protocol_;
  uint64_t adam_steps_ = 0;                  // non-skipped steps so far
  uint64_t inject_overflow_step_ = UINT64_MAX;
  uint64_t inject_partial_apply_step_ = UINT64_MAX;
  std::function<absl::Status(uint64_t, const LossScalerState&)> before_apply_;
  EngineMemory memory_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_STEP_ENGINE_H_
