#include "server/model_shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "wire/proto_convert.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "optim/optimizer.h"
#include "optim/optimizer_pool.h"
#include "server/kv_store.h"

namespace zeroshard {
namespace {

constexpr double kDefaultInitStd = 0.02;

OptimizerPool& ApplyPool() {
  // Never destroyed: helper threads may still be parked at process exit.
  static OptimizerPool* pool = new OptimizerPool(OptimizerThreads());
  return *pool;
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

absl::Status ValidateCoefficient(double coefficient) {
  if (!std::isfinite(coefficient) || coefficient < 0 ||
      coefficient > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coefficient ", coefficient,
        " is not valid: it must be finite, >= 0 and representable as float"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::InitRequest> ModelShard::Normalize(
    const v1::InitRequest& request) {
  v1::InitRequest out = request;
  if (absl::Status s = KvStore::ValidateRunId(out.run_id()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Init: ", s.message()));
  }
  // 0: one worker per partition (the manifest's partition_count).
  if (out.num_workers() == 0) {
    out.set_num_workers(std::max<uint32_t>(1, out.manifest().partition_count()));
  }
  if (out.manifest().partition_count() != 0 &&
      out.manifest().partition_count() % out.num_workers() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Init: num_workers (", out.num_workers(),
        ") must divide manifest.partition_count (",
        out.manifest().partition_count(), ")"));
  }
  if (out.replicas() == 0) out.set_replicas(1);
  if (out.replicas() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Init: replicas (", out.replicas(), ") must be 1 or 2"));
  }
  if (out.replicas() == 2 && out.num_servers() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Init: replicas 2 needs at least 2 servers (each slot's copy lives "
        "on the next server); the cluster has ", out.num_servers()));
  }
  if (out.chunk_elems() == 0) out.set_chunk_elems(kDefaultChunkElems);
  if (out.chunk_elems() % kFlatAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Init: chunk_elems (", out.chunk_elems(), ") must be a multiple of ",
        kFlatAlignment));
  }
  const double std = out.init().init_std();
  if (!std::isfinite(std) || std < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Init: init.init_std (", std, ") must be finite and >= 0"));
  }
  if (std == 0) out.mutable_init()->set_init_std(kDefaultInitStd);
  if (out.init().source_case() == v1::InitValues::SOURCE_NOT_SET) {
    return absl::InvalidArgumentError(
        "Init: init.source must be set (seed or zeros)");
  }
  if (out.init().source_case() == v1::InitValues::kZeros &&
      !out.init().zeros()) {
    return absl::InvalidArgumentError(
        "Init: init.zeros must be true when it is the source");
  }
  return out;
}

std::string ModelShard::DescribeConflict(const v1::InitRequest& a,
                                         const v1::InitRequest& b) {
  using google::protobuf::util::MessageDifferencer;
  if (a.num_servers() != b.num_servers() ||
      a.server_index() != b.server_index()) {
    return "server_index / num_servers";
  }
  if (!MessageDifferencer::Equals(a.manifest(), b.manifest())) {
    return "manifest";
  }
  if (!MessageDifferencer::Equals(a.optimizer(), b.optimizer())) {
    return "optimizer";
  }
  if (!MessageDifferencer::Equals(a.init(), b.init())) return "init";
  if (a.chunk_elems() != b.chunk_elems()) return "chunk_elems";
  if (a.run_id() != b.run_id()) return "run_id (another run owns this server)";
  if (a.num_workers() != b.num_workers()) return "num_workers";
  if (a.replicas() != b.replicas()) return "replicas";
  if (!MessageDifferencer::Equals(a, b)) return "request";
  return "";
}

absl::StatusOr<std::unique_ptr<ModelShard>> ModelShard::Create(
    const v1::InitRequest& raw, ServerIdentity identity, Placement placement) {
  ASSIGN_OR_RETURN(v1::InitRequest request, Normalize(raw));
  if (request.num_servers() == 0 ||
      request.server_index() >= request.num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Init: server_index (", request.server_index(),
        ") must be < num_servers (", request.num_servers(), ")"));
  }
  if (request.server_index() != identity.server_index ||
      request.num_servers() != identity.num_servers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Init for server ", request.server_index(), " of ",
        request.num_servers(), " reached server ", identity.server_index,
        " of ", identity.num_servers, " (--server_index / --num_servers)"));
  }
  if (absl::Status s = CheckManifestRules(request.manifest()); !s.ok()) {
    return Prefixed("Init: ", s);
  }
  const ModelManifest manifest = FromProto(request.manifest());
  absl::StatusOr<FlatLayout> layout = FlatLayout::Create(
      manifest, request.num_servers(), request.num_workers());
  if (!layout.ok()) return Prefixed("Init: manifest: ", layout.status());
  absl::StatusOr<OptimizerConfig> config = FromProto(request.optimizer());
  if (!config.ok()) return Prefixed("Init: ", config.status());
  if (absl::Status s = ValidateOptimizerConfig(*config); !s.ok()) {
    return Prefixed("Init: optimizer: ", s);
  }
  absl::StatusOr<const UpdateRule*> rule = UpdateRuleFor(*config);
  if (!rule.ok()) return Prefixed("Init: ", rule.status());
  if (placement == Placement::kDevice && !(*rule)->HasDeviceUpdate()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Init: optimizer rule ", (*rule)->name(),
        " has no device kernel in this build; start the servers with "
        "--placement=host or --placement=pinned"));
  }
  std::unique_ptr<ModelShard> state(new ModelShard(*std::move(layout)));
  state->optimizer_ = *config;
  const FlatRange owned = state->layout_.ServerRange(identity.server_index);
  absl::StatusOr<ParamGroupTable> groups = ParamGroupTable::Create(
      request.optimizer(), owned, state->layout_.total_elems());
  if (!groups.ok()) return Prefixed("Init: ", groups.status());
  state->param_groups_ = *std::move(groups);
  // Tensor rules keep their state in the element-wise rule's FP32 slots.
  size_t fp32_slots = 0;
  for (const StateSlot& slot : (*rule)->slots()) {
    fp32_slots += slot.format == SlotFormat::kFp32 ? 1 : 0;
  }
  absl::StatusOr<std::vector<WholeTensor>> whole = FindWholeTensors(
      request.optimizer(), state->layout_, owned, fp32_slots);
  if (!whole.ok()) return Prefixed("Init: ", whole.status());
  state->whole_tensors_ = *std::move(whole);
  if (!state->whole_tensors_.empty() && placement == Placement::kDevice) {
    return absl::FailedPreconditionError(
        "Init: the tensor rules of parameter groups (Muon, Adafactor) have "
        "no device kernel in "
        "this build; start the servers with --placement=host or "
        "--placement=pinned");
  }
  ASSIGN_OR_RETURN(state->store_, ShardStore::Create(
                                      owned, request.chunk_elems(), placement,
                                      **rule));
  state->tracker_ =
      std::make_unique<StepTracker>(owned, request.chunk_elems());
  state->prepared_ = std::make_unique<PreparedPushes>(state->store_.get(),
                                                      state->tracker_.get());
  state->snapshots_ = std::make_unique<SnapshotArming>(state->store_.get(),
                                                       state->tracker_.get());
  uint64_t state_bytes = 0;
  for (const auto& [kind, bytes] : state->store_->BytesByKind()) {
    state_bytes += bytes;
  }
  state->step_log_ = std::make_unique<StepLog>(
      std::max<uint64_t>(uint64_t{64} << 20, state_bytes));
  if (request.init().source_case() == v1::InitValues::kSeed) {
    RETURN_IF_ERROR(state->store_->FillSeeded(
        state->layout_, request.init().seed(), request.init().init_std()));
  } else {
    RETURN_IF_ERROR(state->store_->FillZeros());
  }
  state->request_ = std::move(request);
  return state;
}

absl::Status ModelShard::CheckOwned(uint64_t offset, uint64_t length,
                                    absl::string_view what) const {
  const FlatRange own = owned();
  if (offset < own.begin || offset > own.end || length > own.end - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " [", offset, ", ", offset + length,
        ") is outside this server's owned range [", own.begin, ", ", own.end,
        ")"));
  }
  return absl::OkStatus();
}

std::string ModelShard::DescribeElement(uint64_t offset) const {
  for (const TensorInfo& t : layout_.tensors()) {
    if (offset >= t.offset && offset - t.offset < t.numel) {
      return absl::StrCat("element ", offset - t.offset, " of tensor '",
                          t.name, "' (flat offset ", offset, ")");
    }
  }
  for (const UnitInfo& u : layout_.units()) {
    if (offset >= u.offset && offset - u.offset < u.padded) {
      return absl::StrCat("flat offset ", offset, " (padding of unit '",
                          u.name, "')");
    }
  }
  return absl::StrCat("flat offset ", offset);
}

absl::Status ModelShard::CheckPusher(uint32_t worker, uint64_t offset,
                                     uint64_t length) const {
  if (worker >= layout_.num_workers()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker rank ", worker, " is not a member of this run (",
        layout_.num_workers(), " workers)"));
  }
  const std::vector<UnitInfo>& units = layout_.units();
  // The first unit that ends after `offset`.
  auto it = std::upper_bound(
      units.begin(), units.end(), offset,
      [](uint64_t x, const UnitInfo& u) { return x < u.offset + u.padded; });
  const uint64_t end = offset + length;
  for (uint64_t at = offset; at < end; ++it) {
    if (it == units.end()) break;  // past the units: caught by CheckOwned
    const FlatRange mine =
        layout_.WorkerUnitRange(worker, static_cast<int>(it - units.begin()));
    const uint64_t unit_end = std::min(end, it->offset + it->padded);
    if (at < mine.begin || unit_end > mine.end) {
      return absl::PermissionDeniedError(absl::StrCat(
          "gradient range [", offset, ", ", end, ") is not worker rank ",
          worker, "'s to push: its part of unit '", it->name, "' is [",
          mine.begin, ", ", mine.end, ")"));
    }
    at = unit_end;
  }
  return absl::OkStatus();
}

absl::StatusOr<ApplyResult> ModelShard::ApplyPush(
    uint64_t step, const StepParams& params,
    absl::Span<const GradPiece> pieces, uint64_t attempt) {
  absl::ReaderMutexLock restore(&restore_mu_);
  return ApplyPushLocked(step, params, pieces, attempt);
}

absl::StatusOr<ApplyResult> ModelShard::ApplyPushLocked(
    uint64_t step, const StepParams& params,
    absl::Span<const GradPiece> pieces, uint64_t attempt) {
  // Before ApplyClaimed indexes the settings by group.
  RETURN_IF_ERROR(param_groups_.CheckSettings(params.settings.size()));
  std::vector<FlatRange> ranges;
  ranges.reserve(pieces.size());
  for (const GradPiece& p : pieces) ranges.push_back(p.range);
  if (!params.skip) {
    RETURN_IF_ERROR(CheckWholeTensorsCovered(pieces));
    RETURN_IF_ERROR(store_->CheckWholeBlocks(ranges));
  }
  ASSIGN_OR_RETURN(StepClaim claim,
                   tracker_->Claim(step, params, ranges, attempt));
  // Before anything of this step touches a chunk (skipped steps included:
  // the next step would change the chunk before a later copy).
  if (claim.capture) snapshots_->CaptureClaimed(claim);
  // Recorded once claimed and before the chunks complete: a push that
  // needs this one's chunks complete is recorded after it.
  if (!claim.segments.empty()) {
    step_log_->Record(step, attempt, params, pieces);
  }
  ApplyResult result;
  result.duplicate_elems = claim.duplicate_elems;
  for (const ClaimedSegment& seg : claim.segments) {
    result.applied_elems += seg.range.size();
  }
  if (!params.skip) {
    ApplyClaimed(claim, params, pieces, result.applied_elems);
    // A device error leaves the claimed chunks incomplete and the store
    // refusing every later call; the step fails here.
    RETURN_IF_ERROR(store_->fault());
    updated_elems_ += result.applied_elems;
  }
  result.chunks_completed = tracker_->Complete(claim);
  // Pushes prepared for a step this commit completed can never apply.
  if (result.chunks_completed > 0) prepared_->DropApplied();
  // A chunk that just reached a snapshot's version is copied now: no claim
  // of that step may ever come (the run's last step).
  if (result.chunks_completed > 0 && snapshots_->any_armed()) {
    snapshots_->CaptureCompleted(claim);
  }
  return result;
}

absl::StatusOr<uint64_t> ModelShard::Prepare(PreparedPush push) {
  RETURN_IF_ERROR(param_groups_.CheckSettings(push.params.settings.size()));
  absl::ReaderMutexLock restore(&restore_mu_);
  return prepared_->Prepare(std::move(push));
}

absl::StatusOr<ApplyResult> ModelShard::ApplyPrepared(uint64_t step,
                                                      uint64_t attempt) {
  // Without this, a second ApplyPrepared of the same step that ran while
  // the first was applying found the prepared pushes taken and the chunks
  // still at `step`, and answered FAILED_PRECONDITION (a retried ApplyStep
  // told "don't retry" although the step was being applied).
  absl::MutexLock one_at_a_time(&apply_step_mu_);
  absl::ReaderMutexLock restore(&restore_mu_);
  ASSIGN_OR_RETURN(std::vector<PreparedPush> mine,
                   prepared_->Take(step, attempt));
  if (mine.empty()) return ApplyResult();  // applied already
  std::vector<GradPiece> pieces;
  int64_t bytes = 0;
  for (const PreparedPush& p : mine) {
    pieces.insert(pieces.end(), p.pieces.begin(), p.pieces.end());
    bytes += p.pending_bytes;
  }
  absl::StatusOr<ApplyResult> r =
      ApplyPushLocked(step, mine.front().params, pieces, attempt);
  store_->AddPendingGradBytes(-bytes);
  if (r.ok()) r->pushes = static_cast<uint32_t>(mine.size());
  return r;
}

absl::Status ModelShard::WriteWeights(FlatRange range, DType dtype,
                                      const void* data) const {
  absl::ReaderMutexLock restore(&restore_mu_);
  RETURN_IF_ERROR(store_->WriteWeights(range, dtype, data));
  snapshots_->ForgetFinishedInMemory();
  return absl::OkStatus();
}

absl::StatusOr<size_t> ModelShard::StateSlotIndex(
    absl::string_view name) const {
  const absl::Span<const StateSlot> slots = store_->rule().slots();
  std::string known;
  for (size_t k = 0; k < slots.size(); ++k) {
    if (slots[k].name == name) {
      // Refused with the stream's first piece, before anything is written
      // (ShardStore::WriteSlot takes FP32 slots only).
      if (slots[k].format != SlotFormat::kFp32) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SetWeights: state \"", name, "\" of ", store_->rule().name(),
            " is kept in 8 bits; a restore writes it whole"));
      }
      return k;
    }
    absl::StrAppend(&known, k == 0 ? "" : ", ", "\"", slots[k].name, "\"");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "SetWeights: state \"", name, "\" is not one the optimizer rule ",
      store_->rule().name(), " keeps (\"master\"", known.empty() ? "" : ", ",
      known, ")"));
}

absl::Status ModelShard::WriteStateSlot(FlatRange range, size_t slot,
                                        const float* data) const {
  absl::ReaderMutexLock restore(&restore_mu_);
  RETURN_IF_ERROR(store_->WriteSlot(range, slot, data));
  snapshots_->ForgetFinishedInMemory();
  return absl::OkStatus();
}

absl::Status ModelShard::SetAdamSteps(uint64_t adam_t) const {
  absl::ReaderMutexLock restore(&restore_mu_);
  RETURN_IF_ERROR(tracker_->SetAdamSteps(adam_t));
  snapshots_->ForgetFinishedInMemory();
  return absl::OkStatus();
}

absl::StatusOr<ModelShard::StateDigest> ModelShard::Digest() const {
  // The tensors' elements only: a restore carries them (padding keeps what
  // Init gave it), so a restored copy and its live twin hash alike.
  std::vector<FlatRange> params;
  for (const TensorInfo& t : layout_.tensors()) {
    const FlatRange r = Intersect(t.range(), owned());
    if (r.size() > 0) params.push_back(r);
  }
  std::sort(params.begin(), params.end(),
            [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  const StepTracker::Summary before = tracker_->Summarize();
  ASSIGN_OR_RETURN(const uint64_t digest, store_->Digest(params));
  const StepTracker::Summary after = tracker_->Summarize();
  if (before.min_version != before.max_version ||
      after.min_version != before.min_version ||
      after.max_version != before.max_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the state digest needs every chunk at one version; they stood at ",
        before.min_version, "..", before.max_version, " and then ",
        after.min_version, "..", after.max_version,
        " (a step was being applied)"));
  }
  return StateDigest{digest, before.min_version};
}

v1::ShardCheckpointHeader ModelShard::CheckpointHeader() const {
  v1::ShardCheckpointHeader h;
  h.set_server_index(request_.server_index());
  h.set_num_servers(request_.num_servers());
  h.mutable_owned()->set_offset(owned().begin);
  h.mutable_owned()->set_length(owned().size());
  h.set_chunk_elems(store_->chunk_elems());
  h.set_model_fingerprint(ModelFingerprint(layout_.manifest()));
  *h.mutable_optimizer() = request_.optimizer();
  *h.mutable_manifest() = request_.manifest();
  for (const StateSlot& slot : store_->rule().slots()) {
    h.add_state_slots(slot.name);
  }
  if (store_->rule().quantized()) {
    for (const StateSlot& slot : store_->rule().slots()) {
      h.add_state_slot_formats(static_cast<v1::StateSlotFormat>(slot.format));
    }
  }
  return h;
}

absl::Status ModelShard::CheckRestorable() const {
  if (snapshots_->InProgress()) {
    return absl::FailedPreconditionError(
        "Restore: a checkpoint snapshot is being taken; retry once it is "
        "written");
  }
  if (tracker_->Summarize().partial_chunks != 0) {
    return absl::FailedPreconditionError(
        "Restore: a step is partly applied on this server; stop the workers "
        "(or restart the server) before restoring");
  }
  return absl::OkStatus();
}

absl::Status ModelShard::RestoreState(uint64_t step, uint64_t adam_t,
                                      const float* master,
                                      absl::Span<const float* const> slots) {
  return RestoreWith(step, adam_t, [&] {
    return store_->WriteState(owned(), master, slots);
  });
}

absl::Status ModelShard::RestoreStateImages(
    uint64_t step, uint64_t adam_t, const float* master,
    absl::Span<const void* const> images) {
  return RestoreWith(step, adam_t, [&] {
    return store_->WriteStateImages(master, images);
  });
}

absl::Status ModelShard::RestoreWith(uint64_t step, uint64_t adam_t,
                                     absl::FunctionRef<absl::Status()> write) {
  absl::MutexLock restore(&restore_mu_);
  // With no push or arming in flight, nothing can claim or arm between
  // these checks and Reset, so Reset cannot fail after the write.
  RETURN_IF_ERROR(CheckRestorable());
  RETURN_IF_ERROR(write());
  RETURN_IF_ERROR(tracker_->Reset(
      step, std::vector<uint64_t>(store_->num_chunks(), adam_t)));
  // Pushes prepared against the replaced state never apply.
  prepared_->Clear();
  // Nor does a log of pushes applied to it.
  step_log_->Close();
  return absl::OkStatus();
}

absl::Status ModelShard::OpenStepLog(uint64_t from_step) {
  // No push is being claimed or applied while the versions are read.
  absl::MutexLock restore(&restore_mu_);
  const StepTracker::Summary v = tracker_->Summarize();
  if (v.max_version > from_step ||
      (v.max_version == from_step && v.partial_chunks != 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "StepLog: this copy has applied some of step ", from_step,
        " already (chunk versions ", v.min_version, " to ", v.max_version,
        ", ", v.partial_chunks, " partly applied): a log from it would miss "
        "pushes"));
  }
  step_log_->Open(from_step);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShardSnapshot>> ModelShard::ArmSnapshot(
    uint64_t step, const std::string& directory) {
  absl::ReaderMutexLock restore(&restore_mu_);
  return snapshots_->Arm(step, directory, CheckpointHeader());
}

std::shared_ptr<ShardSnapshot> ModelShard::FindSnapshot(
    uint64_t step, const std::string& directory) const {
  return snapshots_->Find(step, directory);
}

bool ModelShard::SnapshotInProgress() const { return snapshots_->InProgress(); }

void ModelShard::ApplyClaimed(const StepClaim& claim, const StepParams& params,
                              absl::Span<const GradPiece> pieces,
                              uint64_t elems) {
  // Segments grouped by chunk, in chunk order.
  std::vector<size_t> order(claim.segments.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return claim.segments[a].chunk < claim.segments[b].chunk;
  });
  std::vector<size_t> starts;  // where each chunk's run begins in `order`
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || claim.segments[order[k]].chunk !=
                      claim.segments[order[k - 1]].chunk) {
      starts.push_back(k);
    }
  }
  starts.push_back(order.size());
  // The push's own hyper-parameters per group (CheckParams matched their
  // count to the groups): the optimizer's config with each group's values.
  std::vector<OptimizerConfig> stepped;
  stepped.reserve(params.settings.size());
  for (const StepSetting& g : params.settings) {
    stepped.push_back(WithStepSetting(optimizer_, g));
  }
  // Applies the segments of chunk runs [lo, hi); each run under one hold of
  // its chunk's lock, its segments spread over `pool` when given.
  auto apply_runs = [&](size_t lo, size_t hi, OptimizerPool* pool) {
    std::vector<ShardStore::ChunkUpdate> updates;
    for (size_t g = lo; g < hi; ++g) {
      updates.clear();
      for (size_t k = starts[g]; k < starts[g + 1]; ++k) {
        const ClaimedSegment& seg = claim.segments[order[k]];
        const GradPiece& piece = pieces[seg.piece];
        const size_t esize = DTypeSize(piece.dtype);
        const char* data = static_cast<const char*>(piece.data) +
                           (seg.range.begin - piece.range.begin) * esize;
        // Received bytes may sit at any address: every kernel loads the
        // gradient unaligned.
        const GradView grad =
            piece.dtype == DType::kBf16
                ? GradView::Bf16(reinterpret_cast<const uint16_t*>(data))
                : GradView::Fp32(reinterpret_cast<const float*>(data));
        // One update per parameter-group setting the segment crosses.
        for (const ParamGroupTable::Span& span :
             param_groups_.Split(seg.range)) {
          if (span.whole) continue;  // ApplyWholeTensors
          const size_t skip = span.range.begin - seg.range.begin;
          const GradView part{
              static_cast<const char*>(grad.data) + skip * esize, grad.bf16};
          // The step's own settings for the group, when the push gave them.
          const bool own = !stepped.empty() && span.group >= 0;
          updates.push_back(
              {own ? store_->rule().MakeStep(
                         stepped[span.group], seg.adam_t,
                         static_cast<float>(params.coefficient),
                         stepped[span.group].weight_decay, 1.0)
                   : store_->rule().MakeStep(
                         optimizer_, seg.adam_t,
                         static_cast<float>(params.coefficient),
                         span.weight_decay, span.lr_scale),
               part, span.range});
        }
      }
      // A device error is the store's fault(), checked by the caller.
      store_->ApplyUpdatesInChunk(claim.segments[order[starts[g]]].chunk,
                                  updates, pool)
          .IgnoreError();
    }
  };
  OptimizerPool& pool = ApplyPool();
  const size_t runs = starts.size() - 1;
  if (elems >= kParallelApplyElems && runs >= 2 && pool.threads() >= 2) {
    // A large push (a commit of many buffered pieces): whole chunks are
    // handed to the threads, so that none waits on another's chunk lock.
    pool.ParallelFor(runs, 1, [&](size_t lo, size_t hi) {
      apply_runs(lo, hi, nullptr);
    });
  } else {
    // A piece or two as they arrive: the segments of each chunk are spread
    // over the threads.
    apply_runs(0, runs, &pool);
  }
  if (!whole_tensors_.empty()) ApplyWholeTensors(claim, params, pieces);
}

}  // namespace zeroshard
