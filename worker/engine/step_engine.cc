#include "worker/engine/step_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grad_clip.h"
#include "common/logging.h"
#include "model/arch.h"
#include "common/optimizer_config.h"
#include "common/status_macros.h"
#include "worker/engine/precision.h"

namespace zeroshard {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

StepEngineConfig StepEngineConfig::From(const TrainingConfig& config) {
  StepEngineConfig c;
  c.model = config.cluster.model;
  c.checkpointing = ModelCheckpointPolicy(config.activation_checkpointing);
  c.precision = config.precision;
  c.communication_data_type = config.communication_data_type;
  c.stage = config.zero.stage;
  c.micro_batch_size = config.micro_batch_size;
  c.gradient_accumulation_steps = config.gradient_accumulation_steps;
  c.train_batch_size = config.train_batch_size;
  c.gradient_clipping = config.gradient_clipping;
  c.loss_scaler = LossScalerOptionsFor(config);
  c.optimizer = config.optimizer;
  c.steps = config.cluster.steps;
  c.step_timeout_s = config.cluster.step_timeout_s;
  c.shared_memory = config.cluster.shared_memory;
  return c;
}

StepEngine::StepEngine(const StepEngineConfig& config, const FlatLayout* layout,
                       int rank, ShardCluster* client, WorkerGroup* group,
                       const BatchSampler* sampler, LossScaler scaler)
    : config_(config),
      layout_(layout),
      rank_(rank),
      world_(group->size()),
      client_(client),
      group_(group),
      sampler_(sampler),
      scaler_(std::move(scaler)),
      param_dtype_(ParamDTypeFor(config.precision)),
      wire_dtype_(config.precision == Precision::kBf16 ? DType::kBf16
                                                       : DType::kFp32),
      stage_(config.stage) {}

StepEngine::~StepEngine() {
  CancelPrefetch();
  (void)queue_.Drain();
  // Model memory is returned before the model that owns it goes.
  grads_.reset();
  cache_.reset();
}

void StepEngine::CancelPrefetch() {
  if (prefetched_step_ < 0) return;
  prefetch_cancel_.Cancel();
  (void)prefetch_.Wait();
  prefetched_step_ = -1;
}

absl::StatusOr<std::unique_ptr<model::UnitModel>> MakeCpuModel(
    const FlatLayout& layout, const GptShape& shape, DType param_dtype,
    const model::CheckpointPolicy& policy) {
  ASSIGN_OR_RETURN(const model::ModelArch* arch, model::ArchForShape(shape));
  return arch->MakeCpuModel(layout, shape, param_dtype, policy);
}

absl::StatusOr<std::unique_ptr<StepEngine>> StepEngine::Create(
    const StepEngineConfig& config, const FlatLayout* layout, int rank,
    ShardCluster* client, WorkerGroup* group, const BatchSampler* sampler,
    const ModelFactory& make_model) {
  if (group->size() != static_cast<int>(layout->num_workers()) ||
      group->rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker group (rank ", group->rank(), " of ", group->size(),
        ") does not match the layout (", layout->num_workers(),
        " workers) and rank ", rank));
  }
  if (config.stage < 1 || config.stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.stage must be 1, 2 or 3, got ", config.stage));
  }
  if (config.micro_batch_size < 1 || config.gradient_accumulation_steps < 1) {
    return absl::InvalidArgumentError("batch sizes are not resolved");
  }
  if (sampler->context() > config.model.context) {
    return absl::InvalidArgumentError("sampler context exceeds the model's");
  }
  ASSIGN_OR_RETURN(LossScaler scaler,
                   LossScaler::Create(config.loss_scaler));
  std::unique_ptr<StepEngine> e(new StepEngine(config, layout, rank, client,
                                               group, sampler,
                                               std::move(scaler)));
  StepProtocolOptions protocol;
  protocol.rank = rank;
  protocol.world = group->size();
  protocol.step_timeout = absl::Seconds(config.step_timeout_s);
  // Always two phases, one worker too: a restarted run finishes a step
  // that was prepared but not applied (resume.h).
  protocol.two_phase = true;
  // Without a cluster (tests of the model side alone) the engine cannot step.
  if (client != nullptr) {
    ASSIGN_OR_RETURN(StepProtocol p,
                     StepProtocol::Create(client, group, protocol));
    e->protocol_.emplace(std::move(p));
    if (config.shared_memory) {
      std::string why;
      absl::StatusOr<int> attached =
          client->AttachSharedMemory(layout->WorkerRanges(rank), &why);
      if (!attached.ok()) return attached.status();
      e->shared_memory_servers_ = *attached;
      if (rank == 0) {
        ZS_LOG(INFO) << "engine: " << *attached << " of "
                     << layout->num_servers()
                     << " servers through shared memory"
                     << (why.empty() ? "" : absl::StrCat(" (", why, ")"));
      }
    }
  }
  ASSIGN_OR_RETURN(e->model_, make_model(*layout, config.model,
                                         e->param_dtype_, config.checkpointing));
  model::ModelMemory* mem = e->model_->memory_space();
  if (mem != nullptr && (group->size() == 1 || group->device_buffers() ||
                         mem->host_addressable())) {
    e->mem_ = mem;
    // A fence or copy that the device does not finish fails the step.
    mem->set_timeout(absl::Seconds(config.step_timeout_s));
  }
  if (group->device_buffers() && e->mem_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the '", group->backend(), "' worker group takes device buffers and "
        "the model computes in host memory; use a host-memory group "
        "(gloo, nccl-host) with the CPU model"));
  }
  e->cache_ = std::make_unique<UnitCache>(layout, rank, e->param_dtype_,
                                          /*resident=*/config.stage < 3,
                                          group, &e->queue_, e->mem_);
  GradShardOptions grad_options;
  grad_options.stage = config.stage;
  grad_options.bf16_wire =
      config.communication_data_type == CommDataType::kBf16;
  ASSIGN_OR_RETURN(e->grads_, GradShard::Create(layout, rank, group, &e->queue_,
                                                e->mem_, grad_options));
  e->memory_.partition_bytes = e->cache_->partition_bytes();
  e->memory_.grad_shard_bytes = e->grads_->shard_bytes();
  e->memory_.push_buffer_bytes = e->grads_->push_buffer_bytes();
  e->memory_.unit_grads_peak = e->grads_->unit_grads_peak();
  const size_t tokens = static_cast<size_t>(config.micro_batch_size) *
                        sampler->context();
  e->inputs_.resize(tokens);
  e->targets_.resize(tokens);
  return e;
}

absl::StatusOr<uint64_t> StepEngine::StartStep() {
  uint64_t lo = UINT64_MAX, hi = 0, adam = UINT64_MAX;
  auto all = client_->InspectAll();
  std::vector<std::string> stands, fresh;
  for (size_t k = 0; k < all.size(); ++k) {
    if (!all[k].ok()) return all[k].status();
    const std::string& address = client_->address(k);
    if (!all[k]->initialized) {
      return absl::FailedPreconditionError(
          absl::StrCat("server ", address, " is not initialised"));
    }
    lo = std::min<uint64_t>(lo, all[k]->min_version);
    hi = std::max<uint64_t>(hi, all[k]->max_version);
    adam = std::min<uint64_t>(adam, all[k]->optimizer_step);
    stands.push_back(absl::StrCat(address, " at ", all[k]->min_version,
                                  "..", all[k]->max_version));
    if (all[k]->max_version == 0 && all[k]->partial_chunks == 0) {
      fresh.push_back(address);
    }
  }
  // With replicas, each slot's second copy stands where the first does
  // (the same steps applied to the same values).
  const int S = client_->num_servers();
  if (lo == hi && client_->options().replicas > 1) {
    for (int slot = 0; slot < S; ++slot) {
      const int k = (slot + 1) % S;
      ASSIGN_OR_RETURN(const ServerStatus copy, client_->InspectCopy(slot, k));
      if (copy.min_version != lo || copy.max_version != lo) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the copy of slot ", slot, " on server ", k, " (",
            client_->address(k), ") stands at ", copy.min_version, "..",
            copy.max_version, " while the slots stand at ", lo,
            "; restore every server from a checkpoint (--resume), or "
            "restart every server to train from step 0"));
      }
    }
  }
  if (lo != hi) {
    // A server at step 0 with nothing applied beside others two or more
    // steps on was restarted (and initialised anew): its state is gone.
    if (!fresh.empty() && hi >= 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", absl::StrJoin(fresh, ", "), " is fresh at step 0 while "
          "the run stands at step ", hi, " (", absl::StrJoin(stands, ", "),
          "): it was restarted and lost its state; restore every server from "
          "a checkpoint (--resume, or zeroshard-ctl restore), or restart "
          "every server to train from step 0"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "servers are mid-step (chunk versions ", lo, "..", hi, ": ",
        absl::StrJoin(stands, ", "),
        "); the previous run did not finish its step"));
  }
  int64_t v[2] = {static_cast<int64_t>(lo), -static_cast<int64_t>(lo)};
  RETURN_IF_ERROR(group_->AllReduce(absl::MakeSpan(v, 2), ReduceOp::kMax));
  if (v[0] != -v[1]) {
    return absl::FailedPreconditionError("workers see different server versions");
  }
  adam_steps_ = adam;
  return lo;
}

absl::Status StepEngine::Fetch(uint64_t step) {
  const std::vector<FlatRange> ranges = layout_->WorkerRanges(rank_);
  if (param_dtype_ == wire_dtype_) {
    return client_
        ->Gather(ranges, wire_dtype_, static_cast<int64_t>(step),
                 cache_->partition(), cache_->partition_bytes(),
                 &prefetch_cancel_)
        .status();
  }
  // fp16: FP32 on the wire, rounded to FP16 here.
  std::vector<float> tmp(grads_->size());
  RETURN_IF_ERROR(client_
                      ->Gather(ranges, DType::kFp32, static_cast<int64_t>(step),
                               tmp.data(), tmp.size() * sizeof(float),
                               &prefetch_cancel_)
                      .status());
  FloatToFp16Array(tmp.data(), reinterpret_cast<uint16_t*>(cache_->partition()),
                   tmp.size());
  return absl::OkStatus();
}

int StepEngine::NextBackwardUnit(int l) const {
  if (l <= 0) return -1;
  const int prev = l - 1;
  if (model_->NeedsRecompute(prev)) {
    return model::UnitModel::block_unit(model_->RecomputeStart(prev));
  }
  return model::UnitModel::block_unit(prev);
}

absl::Status StepEngine::ForwardBlocks() {
  const int L = model_->num_blocks();
  const int emb = model::UnitModel::embedding_unit();
  const int fin = model_->final_unit();
  cache_->Prefetch(emb);
  {
    ASSIGN_OR_RETURN(model::UnitParams p, cache_->Acquire(emb));
    cache_->Prefetch(model::UnitModel::block_unit(0));
    RETURN_IF_ERROR(model_->EmbeddingForward(p));
    cache_->Release(emb);
  }
  for (int l = 0; l < L; ++l) {
    const int u = model::UnitModel::block_unit(l);
    ASSIGN_OR_RETURN(model::UnitParams p, cache_->Acquire(u));
    cache_->Prefetch(l + 1 < L ? model::UnitModel::block_unit(l + 1) : fin);
    RETURN_IF_ERROR(model_->BlockForward(l, p));
    cache_->Release(u);
  }
  return absl::OkStatus();
}

absl::Status StepEngine::MicroBatch(uint64_t step, int micro, bool last,
                                    PushSession* push, double* loss) {
  const int b = config_.micro_batch_size;
  const int T = sampler_->context();
  const int L = model_->num_blocks();
  const int emb = model::UnitModel::embedding_unit();
  const int fin = model_->final_unit();
  const bool per_unit_rs = stage_ >= 2;
  const bool accumulate = micro > 0;
  PushSession* unit_push = (last && per_unit_rs) ? push : nullptr;
  RETURN_IF_ERROR(sampler_->FillMicroBatch(step, rank_, world_, micro, b,
                                           absl::MakeSpan(inputs_),
                                           absl::MakeSpan(targets_)));
  RETURN_IF_ERROR(model_->Begin(b, T, inputs_, targets_));

  // Forward.
  RETURN_IF_ERROR(ForwardBlocks());
  // Final: ln_f + tied head + loss, then the start of backward.
  using UnitGradPtr = GradShard::UnitGradPtr;
  ASSIGN_OR_RETURN(UnitGradPtr grad_fin, grads_->Buffer(fin, accumulate));
  ASSIGN_OR_RETURN(UnitGradPtr grad_emb, grads_->Buffer(emb, accumulate));
  {
    cache_->Prefetch(emb);
    ASSIGN_OR_RETURN(model::UnitParams pf, cache_->Acquire(fin));
    ASSIGN_OR_RETURN(model::UnitParams pe, cache_->Acquire(emb));
    if (L > 0) cache_->Prefetch(NextBackwardUnit(L));
    ASSIGN_OR_RETURN(
        double l, model_->FinalForwardBackward(
                      pf, pe, static_cast<float>(scaler_.scale()),
                      grads_->Span(fin, grad_fin), grads_->Span(emb, grad_emb)));
    *loss += l;
    cache_->Release(fin);
    cache_->Release(emb);
  }
  if (per_unit_rs) grads_->QueueReduceScatter(fin, std::move(grad_fin), accumulate, unit_push);

  // Backward through the blocks.
  for (int l = L - 1; l >= 0; --l) {
    if (model_->NeedsRecompute(l)) {
      for (int j = model_->RecomputeStart(l); j <= l; ++j) {
        const int u = model::UnitModel::block_unit(j);
        ASSIGN_OR_RETURN(model::UnitParams p, cache_->Acquire(u));
        cache_->Prefetch(j < l ? model::UnitModel::block_unit(j + 1)
                               : model::UnitModel::block_unit(l));
        RETURN_IF_ERROR(model_->RecomputeBlock(j, p));
        if (j < l) cache_->Release(u);
      }
    }
    const int u = model::UnitModel::block_unit(l);
    ASSIGN_OR_RETURN(model::UnitParams p, cache_->Acquire(u));
    const int next = NextBackwardUnit(l);
    if (next >= 0) cache_->Prefetch(next);
    ASSIGN_OR_RETURN(UnitGradPtr grad, grads_->Buffer(u, accumulate));
    RETURN_IF_ERROR(model_->BlockBackward(l, p, grads_->Span(u, grad)));
    cache_->Release(u);
    if (per_unit_rs) {
      grads_->QueueReduceScatter(u, std::move(grad), accumulate, unit_push);
    }
  }
  RETURN_IF_ERROR(model_->EmbeddingBackward(grads_->Span(emb, grad_emb)));
  if (per_unit_rs) grads_->QueueReduceScatter(emb, std::move(grad_emb), accumulate, unit_push);
  return absl::OkStatus();
}

absl::StatusOr<double> StepEngine::EvalLoss(uint64_t version, const BatchSampler& sampler,
                                            int batches) {
  if (batches < 1 || sampler.context() != sampler_->context()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation: ", batches, " batches of context ", sampler.context(),
        "; need >= 1 batch of the training context ", sampler_->context()));
  }
  RETURN_IF_ERROR(cache_->ReleaseAll());
  if (prefetched_step_ == static_cast<int64_t>(version)) {
    prefetched_step_ = -1;
    RETURN_IF_ERROR(prefetch_.Wait());
  } else if (fetched_step_ != static_cast<int64_t>(version)) {
    CancelPrefetch();
    prefetch_cancel_.Reset();
    RETURN_IF_ERROR(Fetch(version));
  }
  fetched_step_ = static_cast<int64_t>(version);
  RETURN_IF_ERROR(cache_->UploadPartition());
  if (stage_ < 3) RETURN_IF_ERROR(cache_->GatherAll());
  const int b = config_.micro_batch_size;
  const int T = sampler.context();
  const int emb = model::UnitModel::embedding_unit();
  const int fin = model_->final_unit();
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    RETURN_IF_ERROR(sampler.FillMicroBatch(0, rank_, world_, k, b, absl::MakeSpan(inputs_),
                                           absl::MakeSpan(targets_)));
    RETURN_IF_ERROR(model_->Begin(b, T, inputs_, targets_));
    RETURN_IF_ERROR(ForwardBlocks());
    cache_->Prefetch(emb);
    ASSIGN_OR_RETURN(model::UnitParams pf, cache_->Acquire(fin));
    ASSIGN_OR_RETURN(model::UnitParams pe, cache_->Acquire(emb));
    ASSIGN_OR_RETURN(double loss, model_->FinalForwardLoss(pf, pe));
    sum += loss;
    cache_->Release(fin);
    cache_->Release(emb);
  }
  RETURN_IF_ERROR(cache_->ReleaseAll());
  double total[1] = {sum};
  RETURN_IF_ERROR(group_->AllReduce(absl::MakeSpan(total, 1), ReduceOp::kSum));
  return total[0] / (static_cast<double>(world_) * batches);
}

absl::StatusOr<StepResult> StepEngine::Step(uint64_t step) {
  if (!protocol_.has_value()) {
    return absl::FailedPreconditionError("the engine has no shard cluster");
  }
  StepResult r;
  r.step = step;
  r.loss_scale = scaler_.scale();
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(cache_->ReleaseAll());
  cache_->ResetPeak();
  if (prefetched_step_ == static_cast<int64_t>(step)) {
    // Fetched while the previous step's commit was being applied.
    prefetched_step_ = -1;
    RETURN_IF_ERROR(prefetch_.Wait());
  } else if (fetched_step_ == static_cast<int64_t>(step)) {
    // EvalLoss fetched it; the partition still holds it.
  } else {
    CancelPrefetch();
    prefetch_cancel_.Reset();
    RETURN_IF_ERROR(Fetch(step));
  }
  fetched_step_ = -1;
  RETURN_IF_ERROR(cache_->UploadPartition());
  if (stage_ < 3) RETURN_IF_ERROR(cache_->GatherAll());
  r.fetch_seconds = Since(t0);

  RETURN_IF_ERROR(grads_->BeginStep());

  const int gas = config_.gradient_accumulation_steps;
  double loss_sum = 0;
  std::unique_ptr<PushSession> push;
  const auto t1 = Clock::now();
  for (int m = 0; m < gas; ++m) {
    const bool last = m + 1 == gas;
    if (last) {
      ASSIGN_OR_RETURN(push, client_->OpenPush(step, rank_));
    }
    absl::Status s = MicroBatch(step, m, last, push.get(), &loss_sum);
    if (!s.ok()) {
      (void)queue_.Drain();
      if (push) push->Abort();
      return s;
    }
  }
  r.compute_seconds = Since(t1);
  const auto t2 = Clock::now();
  if (stage_ == 1) grads_->QueueResident(push.get());
  absl::Status comm = queue_.Drain();
  r.comm_wait_seconds = Since(t2);
  if (!comm.ok()) {
    push->Abort();
    return comm;
  }
  memory_.unit_params_peak =
      std::max(memory_.unit_params_peak, cache_->peak_bytes());
  memory_.unit_grads_peak = grads_->unit_grads_peak();

  if (step == inject_overflow_step_) grads_->InjectOverflow();
  absl::StatusOr<double> sumsq = grads_->SumOfSquares();
  if (!sumsq.ok()) {
    push->Abort();
    return absl::Status(sumsq.status().code(),
                        absl::StrCat("step ", step, ": ",
                                     sumsq.status().message()));
  }
  // Global norm, overflow and loss in one all-reduce; the ranks' one
  // decision (step/step_protocol.h).
  const auto t3 = Clock::now();
  double sums[2] = {*sumsq, loss_sum};
  const double denom = static_cast<double>(world_) * gas;
  absl::StatusOr<StepDecision> decision = protocol_->Decide(
      absl::MakeSpan(sums, 2), denom, config_.gradient_clipping, &scaler_);
  if (!decision.ok()) {
    push->Abort();
    return decision.status();
  }
  // Two-phase: the servers hold the pushes until rank 0 applies the step
  // below (docs/DESIGN.md, "Crash recovery").
  const StepCommit commit = protocol_->CommitFor(*decision);
  RETURN_IF_ERROR(push->SendCommit(commit));
  // The servers serve version step+1 chunk by chunk as they apply the
  // commit: the next step's fetch starts now, on the comm queue (idle after
  // the drain), and overlaps the update (docs/DESIGN.md, "One training
  // step", item 6).
  if (step + 1 < config_.steps) {
    prefetch_cancel_.Reset();
    prefetched_step_ = static_cast<int64_t>(step + 1);
    prefetch_ = queue_.Submit([this, next = step + 1] { return Fetch(next); });
  }
  absl::StatusOr<PushResult> pushed = push->Wait();
  if (!pushed.ok()) {
    CancelPrefetch();
    return pushed.status();
  }
  // The barrier, then rank 0 checkpoints when one is due and applies the
  // step on every server.
  absl::Status committed = protocol_->Commit(
      step, client_->options().attempt, [&]() -> absl::Status {
        if (before_apply_) RETURN_IF_ERROR(before_apply_(step + 1, scaler_.state()));
        if (step != inject_partial_apply_step_) return absl::OkStatus();
        RETURN_IF_ERROR(client_->ApplyStepOn(
            0, step, client_->options().attempt,
            absl::Seconds(config_.step_timeout_s)));
        return absl::AbortedError(absl::StrCat(
            "injected fault: step ", step, " applied on server 0 only"));
      });
  if (!committed.ok()) {
    CancelPrefetch();
    return committed;
  }
  r.commit_seconds = Since(t3);

  r.loss = sums[1] / denom;
  r.grad_norm = decision->norm;
  r.clip_factor = decision->clip_factor;
  r.skipped = commit.skip;
  if (!r.skipped) ++adam_steps_;
  r.lr = LearningRateAt(config_.optimizer, std::max<uint64_t>(adam_steps_, 1));
  r.tokens = static_cast<uint64_t>(config_.train_batch_size) *
             sampler_->context();
  r.seconds = Since(t0);
  return r;
}

}  // namespace zeroshard
