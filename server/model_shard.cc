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

// Calls fn(chunk, elems) for each part of `pieces` that falls in one chunk
// of `store`, in order; stops at the first call that returns false, and
// returns whether none did.
template <typename Fn>
bool ForEachChunkPart(const ShardStore& store,
                      absl::Span<const GradPiece> pieces, Fn fn) {
  for (const GradPiece& g : pieces) {
    uint64_t pos = g.range.begin;
    while (pos < g.range.end) {
      const size_t c = store.ChunkOf(pos);
      const uint64_t end = std::min(g.range.end, store.ChunkRange(c).end);
      if (!fn(c, end - pos)) return false;
      pos = end;
    }
  }
  return true;
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
  std::unique_ptr<ModelShard> state(new ModelShard(*std::move(layout)));
  state->optimizer_ = *config;
  const FlatRange owned = state->layout_.ServerRange(identity.server_index);
  absl::StatusOr<ParamGroupTable> groups = ParamGroupTable::Create(
      request.optimizer(), owned, state->layout_.total_elems());
  if (!groups.ok()) return Prefixed("Init: ", groups.status());
  state->param_groups_ = *std::move(groups);
  ASSIGN_OR_RETURN(state->store_, ShardStore::Create(
                                      owned, request.chunk_elems(), placement,
                                      UpdateRuleFor(config->kind)));
  state->tracker_ =
      std::make_unique<StepTracker>(owned, request.chunk_elems());
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
  std::vector<FlatRange> ranges;
  ranges.reserve(pieces.size());
  for (const GradPiece& p : pieces) ranges.push_back(p.range);
  ASSIGN_OR_RETURN(StepClaim claim,
                   tracker_->Claim(step, params, ranges, attempt));
  // Before anything of this step touches a chunk (skipped steps included:
  // the next step would change the chunk before a later copy).
  if (claim.capture) CaptureClaimed(claim);
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
  if (result.chunks_completed > 0) DropAppliedPrepared();
  // A chunk that just reached a snapshot's version is copied now: no claim
  // of that step may ever come (the run's last step).
  if (result.chunks_completed > 0 && armed_.load() > 0) {
    CaptureCompleted(claim);
  }
  return result;
}

void ModelShard::DropPreparedBefore(uint64_t step, uint64_t attempt) {
  auto old = [&](const PreparedPush& p) {
    return p.attempt < attempt || (p.attempt == attempt && p.step < step);
  };
  for (const PreparedPush& p : prepared_) {
    if (old(p)) store_->AddPendingGradBytes(-p.pending_bytes);
  }
  prepared_.erase(std::remove_if(prepared_.begin(), prepared_.end(), old),
                  prepared_.end());
}

absl::Status ModelShard::ClassifyPrepared(uint64_t step,
                                          absl::Span<const GradPiece> pieces,
                                          uint64_t* at_step,
                                          uint64_t* applied) const {
  *at_step = 0;
  *applied = 0;
  size_t wrong = SIZE_MAX;
  ForEachChunkPart(*store_, pieces, [&](size_t c, uint64_t elems) {
    const uint64_t v = tracker_->version(c);
    if (v == step) {
      *at_step += elems;
    } else if (v == step + 1) {
      *applied += elems;
    } else {
      wrong = c;
      return false;
    }
    return true;
  });
  if (wrong == SIZE_MAX) return absl::OkStatus();
  const FlatRange chunk = store_->ChunkRange(wrong);
  const uint64_t v = tracker_->version(wrong);
  return absl::AbortedError(absl::StrCat(
      "prepare for step ", step, " is ", v > step ? "stale" : "ahead",
      ": chunk [", chunk.begin, ", ", chunk.end, ") is at version ", v,
      " (steps applied) and accepts step ", v, " only"));
}

absl::StatusOr<uint64_t> ModelShard::Prepare(PreparedPush push) {
  absl::ReaderMutexLock restore(&restore_mu_);
  // Every check first; only an accepted prepare records its attempt.
  auto refuse = [&](absl::Status s) -> absl::StatusOr<uint64_t> {
    store_->AddPendingGradBytes(-push.pending_bytes);
    return s;
  };
  if (absl::Status s = tracker_->CheckAttempt(push.attempt); !s.ok()) {
    return refuse(s);
  }
  if (absl::Status s = tracker_->CheckParams(push.step, push.params);
      !s.ok()) {
    return refuse(s);
  }
  absl::MutexLock lock(&prepared_mu_);
  // Read under prepared_mu_: a commit that completes these chunks sweeps
  // the prepared pushes after it publishes their versions, so a push held
  // here is either seen as applied now or dropped by that sweep.
  uint64_t at_step = 0, applied = 0;
  if (absl::Status s =
          ClassifyPrepared(push.step, push.pieces, &at_step, &applied);
      !s.ok()) {
    return refuse(s);
  }
  for (const PreparedPush& p : prepared_) {
    if (p.step == push.step && p.attempt == push.attempt &&
        p.worker != push.worker &&
        (p.params.coefficient != push.params.coefficient ||
         p.params.skip != push.params.skip)) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(
          "prepare for step ", push.step, " from worker ", push.worker,
          " has coefficient ", push.params.coefficient, " skip=",
          push.params.skip, ", but worker ", p.worker, " prepared coefficient ",
          p.params.coefficient, " skip=", p.params.skip,
          "; every push of one step must agree")));
    }
  }
  if (at_step == 0) {
    // Nothing of it can apply any more (or it is empty): acknowledged as a
    // duplicate and held by no one.
    store_->AddPendingGradBytes(-push.pending_bytes);
    return applied;
  }
  if (absl::Status s = tracker_->NoteAttempt(push.attempt); !s.ok()) {
    return refuse(s);
  }
  DropPreparedBefore(push.step, push.attempt);
  for (PreparedPush& p : prepared_) {
    if (p.step == push.step && p.attempt == push.attempt &&
        p.worker == push.worker) {
      // A retried stream of the same worker: the newer copy stands.
      store_->AddPendingGradBytes(-p.pending_bytes);
      p = std::move(push);
      return uint64_t{0};
    }
  }
  prepared_.push_back(std::move(push));
  return uint64_t{0};
}

void ModelShard::DropAppliedPrepared() {
  absl::MutexLock lock(&prepared_mu_);
  auto applied = [&](const PreparedPush& p) {
    return ForEachChunkPart(*store_, p.pieces, [&](size_t c, uint64_t) {
      return tracker_->version(c) > p.step;
    });
  };
  for (auto it = prepared_.begin(); it != prepared_.end();) {
    if (applied(*it)) {
      store_->AddPendingGradBytes(-it->pending_bytes);
      it = prepared_.erase(it);
    } else {
      ++it;
    }
  }
}

ModelShard::PreparedSummary ModelShard::prepared() const {
  absl::MutexLock lock(&prepared_mu_);
  PreparedSummary s;
  for (const PreparedPush& p : prepared_) {
    s.step = p.step;
    s.attempt = p.attempt;
    for (const GradPiece& g : p.pieces) s.elems += g.range.size();
  }
  return s;
}

absl::StatusOr<ApplyResult> ModelShard::ApplyPrepared(uint64_t step,
                                                      uint64_t attempt) {
  // Bug fix: without this, a second ApplyPrepared of the same step that ran
  // while the first was applying found the prepared pushes taken and the
  // chunks still at `step`, and answered FAILED_PRECONDITION (a retried
  // ApplyStep told "don't retry" although the step was being applied).
  absl::MutexLock one_at_a_time(&apply_step_mu_);
  absl::ReaderMutexLock restore(&restore_mu_);
  // Every check before any change: a refused ApplyStep drops no prepared
  // push and records no attempt (the claim below records it).
  RETURN_IF_ERROR(tracker_->CheckAttempt(attempt));
  std::vector<PreparedPush> mine;
  {
    absl::MutexLock lock(&prepared_mu_);
    // Elements of chunks still at `step`, and how many of them the
    // prepared pushes hold (workers' partitions are disjoint, and one push
    // per worker is kept).
    uint64_t needed = 0, covered = 0;
    for (size_t c = 0; c < store_->num_chunks(); ++c) {
      if (tracker_->version(c) == step) needed += store_->ChunkRange(c).size();
    }
    const PreparedPush* first = nullptr;
    for (const PreparedPush& p : prepared_) {
      if (p.step != step || p.attempt != attempt) continue;
      if (first == nullptr) first = &p;
      if (p.params.coefficient != first->params.coefficient ||
          p.params.skip != first->params.skip) {
        // Prepare refuses this; kept as the stated rule.
        return absl::InvalidArgumentError(absl::StrCat(
            "ApplyStep ", step, ": workers ", first->worker, " and ",
            p.worker, " prepared different coefficients or skip flags; "
            "nothing applied"));
      }
      ForEachChunkPart(*store_, p.pieces, [&](size_t c, uint64_t elems) {
        if (tracker_->version(c) == step) covered += elems;
        return true;
      });
    }
    if (needed == 0) {
      // No chunk at `step`: every one is past it (applied already), or
      // none has reached it (a step ahead of the servers).
      if (store_->num_chunks() > 0 && tracker_->version(0) < step) {
        return absl::AbortedError(absl::StrCat(
            "ApplyStep ", step, " is ahead: the chunks are at version ",
            tracker_->version(0)));
      }
      return ApplyResult();  // applied already
    }
    if (covered < needed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ApplyStep ", step, " (attempt ", attempt, "): the prepared pushes "
          "hold ", covered, " of the ", needed, " elements still at version ",
          step, "; a worker has not prepared here"));
    }
    // The claim below must not fail once the pushes are taken.
    RETURN_IF_ERROR(tracker_->CheckParams(step, first->params));
    DropPreparedBefore(step, attempt);
    for (auto it = prepared_.begin(); it != prepared_.end();) {
      if (it->step == step && it->attempt == attempt) {
        mine.push_back(std::move(*it));
        it = prepared_.erase(it);
      } else {
        ++it;
      }
    }
  }
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
  return h;
}

absl::Status ModelShard::CheckRestorable() const {
  if (SnapshotInProgress()) {
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
  absl::MutexLock restore(&restore_mu_);
  // With no push or arming in flight, nothing can claim or arm between
  // these checks and Reset, so Reset cannot fail after the write.
  RETURN_IF_ERROR(CheckRestorable());
  RETURN_IF_ERROR(store_->WriteState(owned(), master, slots));
  RETURN_IF_ERROR(tracker_->Reset(
      step, std::vector<uint64_t>(store_->num_chunks(), adam_t)));
  // Pushes prepared against the replaced state never apply.
  absl::MutexLock lock(&prepared_mu_);
  for (const PreparedPush& p : prepared_) {
    store_->AddPendingGradBytes(-p.pending_bytes);
  }
  prepared_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShardSnapshot>> ModelShard::ArmSnapshot(
    uint64_t step, const std::string& directory) {
  absl::ReaderMutexLock restore(&restore_mu_);
  std::shared_ptr<ShardSnapshot> snap;
  std::vector<size_t> at_step;
  {
    absl::MutexLock lock(&snap_mu_);
    for (const auto& s : snapshots_) {
      if (s->step() == step && s->directory() == directory) return s;
    }
    // Counted before the tracker arms, so that a chunk completing to `step`
    // meanwhile looks for the snapshot (and waits for snap_mu_).
    ++armed_;
    absl::StatusOr<std::vector<size_t>> armed = tracker_->ArmCapture(step);
    if (!armed.ok()) {
      --armed_;
      return armed.status();
    }
    at_step = *std::move(armed);
    snap = std::make_shared<ShardSnapshot>(step, directory, CheckpointHeader(),
                                           store_->num_chunks());
    if (!snap->allocated()) {
      tracker_->DisarmCapture(step);
      --armed_;
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate the ", 12 * owned().size(),
          " bytes a snapshot of this shard needs (master, m and v)"));
    }
    // Keep the armed ones and the two newest finished ones.
    std::vector<std::shared_ptr<ShardSnapshot>> kept;
    int finished = 0;
    for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it) {
      if ((*it)->result().has_value() && ++finished > 2) continue;
      kept.insert(kept.begin(), *it);
    }
    snapshots_ = std::move(kept);
    snapshots_.push_back(snap);
  }
  // A server that owns nothing (more servers than 64-element blocks) has no
  // chunk whose copy would finish the snapshot: it is complete at once.
  if (store_->num_chunks() == 0) FinishIfLast(*snap, true);
  // Chunks at `step` with nothing claimed: no claim of `step` has reached
  // them, and any that does copies first, so a copy made meanwhile is clean
  // too. They are copied on the snapshot's own thread, so that arming
  // returns at once (the usual case: the servers applied step-1 before the
  // coordinator arms step, so every chunk is here).
  if (!at_step.empty()) {
    ShardSnapshot* raw = snap.get();
    raw->RunInBackground([this, raw, chunks = std::move(at_step)] {
      for (size_t c : chunks) {
        if (raw->stopping()) return;
        FinishIfLast(*raw, raw->Capture(*store_, c, tracker_->adam_t(c)));
      }
    });
  }
  return snap;
}

std::shared_ptr<ShardSnapshot> ModelShard::FindSnapshot(
    uint64_t step, const std::string& directory) const {
  absl::MutexLock lock(&snap_mu_);
  for (const auto& s : snapshots_) {
    if (s->step() == step && s->directory() == directory) return s;
  }
  return nullptr;
}

bool ModelShard::SnapshotInProgress() const {
  absl::MutexLock lock(&snap_mu_);
  for (const auto& s : snapshots_) {
    if (!s->result().has_value()) return true;
  }
  return false;
}

void ModelShard::FinishIfLast(ShardSnapshot& snap, bool last) {
  if (!last) return;
  tracker_->DisarmCapture(snap.step());
  --armed_;
  snap.Finish();
}

std::vector<std::shared_ptr<ShardSnapshot>> ModelShard::ArmedAt(
    uint64_t step) const {
  std::vector<std::shared_ptr<ShardSnapshot>> armed;
  absl::MutexLock lock(&snap_mu_);
  for (const auto& s : snapshots_) {
    if (s->step() == step && !s->result().has_value()) armed.push_back(s);
  }
  return armed;
}

void ModelShard::CaptureCompleted(const StepClaim& claim) {
  const uint64_t v = claim.step + 1;
  const std::vector<std::shared_ptr<ShardSnapshot>> armed = ArmedAt(v);
  if (armed.empty()) return;
  size_t prev = SIZE_MAX;
  for (const ClaimedSegment& seg : claim.segments) {
    if (seg.chunk == prev || tracker_->version(seg.chunk) != v) continue;
    prev = seg.chunk;
    for (const auto& snap : armed) {
      FinishIfLast(*snap,
                   snap->Capture(*store_, seg.chunk, tracker_->adam_t(seg.chunk)));
    }
  }
}

void ModelShard::CaptureClaimed(const StepClaim& claim) {
  const std::vector<std::shared_ptr<ShardSnapshot>> armed =
      ArmedAt(claim.step);
  size_t prev = SIZE_MAX;
  for (const ClaimedSegment& seg : claim.segments) {
    if (seg.chunk == prev) continue;  // segments of a chunk are often adjacent
    prev = seg.chunk;
    for (const auto& snap : armed) {
      // seg.adam_t is the count this update will use: t at version s, + 1.
      FinishIfLast(*snap, snap->Capture(*store_, seg.chunk, seg.adam_t - 1));
    }
  }
}

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
          const size_t skip = span.range.begin - seg.range.begin;
          const GradView part{
              static_cast<const char*>(grad.data) + skip * esize, grad.bf16};
          updates.push_back(
              {store_->rule().MakeStep(optimizer_, seg.adam_t,
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
}

}  // namespace zeroshard
