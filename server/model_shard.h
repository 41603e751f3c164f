// An initialised shard: the layout, the optimizer config, the ShardStore and
// its StepTracker, built from one InitRequest. Everything the RPC handlers
// do to the model state goes through here, after validation.
//
//   ASSIGN_OR_RETURN(auto state, ModelShard::Create(request, {0, 2}, kHost));
//   RETURN_IF_ERROR(state->CheckOwned(range, "piece"));
//   ASSIGN_OR_RETURN(ApplyResult r, state->ApplyPush(step, params, pieces));
//
// Thread-safe: the members are fixed after Create; the store and tracker
// are thread-safe. RestoreState is exclusive against everything that
// changes the state (pushes, prepares, ApplyPrepared, arming a snapshot):
// each of those holds one shared lock for its whole call.
#ifndef ZEROSHARD_SERVER_MODEL_SHARD_H_
#define ZEROSHARD_SERVER_MODEL_SHARD_H_

#include <atomic>
#include <functional>
#include <map>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/optimizer_config.h"
#include "common/param_groups.h"
#include "optim/whole_tensor_rule.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/param_group_table.h"
#include "server/prepared_pushes.h"
#include "server/placement.h"
#include "server/shard_snapshot.h"
#include "server/snapshot_arming.h"
#include "server/shard_store.h"
#include "server/step_log.h"
#include "server/step_tracker.h"
#include "wire/push_grad_codec.h"

namespace zeroshard {

// Pushes of at least this many elements (a commit of many buffered pieces)
// are applied chunk by chunk on several threads; smaller ones spread the
// segments of each chunk over the threads.
inline constexpr uint64_t kParallelApplyElems = uint64_t{1} << 20;
// Default elements per version chunk.
inline constexpr uint64_t kDefaultChunkElems = 262144;

// Which server this process is, fixed at start-up.
struct ServerIdentity {
  uint32_t server_index = 0;
  uint32_t num_servers = 1;
};

// What one ApplyPush did (the server's side; the client sums these into its
// PushResult).
struct ApplyResult {
  uint64_t applied_elems = 0;
  uint64_t duplicate_elems = 0;
  uint64_t chunks_completed = 0;
  uint32_t pushes = 0;  // prepared pushes applied (ApplyPrepared)
};

class ModelShard {
 public:
  // Validates the request (for this server, manifest, optimizer, chunk size,
  // init values), allocates the store in `placement` and fills it.
  static absl::StatusOr<std::unique_ptr<ModelShard>> Create(
      const v1::InitRequest& request, ServerIdentity identity,
      Placement placement);

  // The request with admin_token cleared and defaults resolved (chunk_elems,
  // init_std): what an identical Init must match.
  static absl::StatusOr<v1::InitRequest> Normalize(
      const v1::InitRequest& request);
  // Empty when equal; otherwise names the first field that differs.
  static std::string DescribeConflict(const v1::InitRequest& a,
                                      const v1::InitRequest& b);

  const v1::InitRequest& request() const { return request_; }
  // The run this server serves (InitRequest.run_id).
  const std::string& run_id() const { return request_.run_id(); }
  const FlatLayout& layout() const { return layout_; }
  const OptimizerConfig& optimizer() const { return optimizer_; }
  // The parameter groups over the owned range (optimizer.param_groups).
  const ParamGroupTable& param_groups() const { return param_groups_; }
  // The optimizer rule the store applies (its slots: what a checkpoint of
  // this shard holds).
  const UpdateRule& rule() const { return store_->rule(); }
  FlatRange owned() const { return store_->owned(); }
  uint64_t chunk_elems() const { return store_->chunk_elems(); }
  size_t num_chunks() const { return store_->num_chunks(); }
  // The store and the tracker themselves, for the checkpoint writer and the
  // tests; the RPC handlers use the calls below.
  ShardStore& store() const { return *store_; }
  StepTracker& tracker() const { return *tracker_; }

  // What Inspect and the metrics report.
  StepTracker::Summary versions() const { return tracker_->Summarize(); }
  uint64_t attempt() const { return tracker_->attempt(); }
  std::map<std::string, uint64_t> BytesByKind() const {
    return store_->BytesByKind();
  }
  absl::StatusOr<StateNorms> Norms() const { return store_->Norms(); }
  // The store's Digest at one committed version: every chunk at `version`
  // before and after the hash (FAILED_PRECONDITION when a step was being
  // applied meanwhile).
  struct StateDigest {
    uint64_t digest = 0;
    uint64_t version = 0;
  };
  absl::StatusOr<StateDigest> Digest() const;

  // Gather: which chunk holds element `offset`, its range and version;
  // Read copies `range` (inside one chunk) under the chunk's lock.
  size_t ChunkOf(uint64_t offset) const { return store_->ChunkOf(offset); }
  FlatRange ChunkRange(size_t chunk) const { return store_->ChunkRange(chunk); }
  uint64_t version(size_t chunk) const { return tracker_->version(chunk); }
  absl::Status Read(FlatRange range, DType dtype, void* out) const {
    return store_->Read(range, dtype, out);
  }
  // Calls `ready` once chunk `chunk` reaches `version` and returns a waiter
  // id, or returns 0 when it is there already (`ready` is not called).
  uint64_t WaitForVersion(size_t chunk, uint64_t v,
                          std::function<void()> ready) const {
    return tracker_->WaitForVersion(chunk, v, std::move(ready));
  }
  // True when the waiter was removed before its callback ran.
  bool CancelWait(uint64_t waiter) const { return tracker_->CancelWait(waiter); }

  // Pushes: the checks a stream's header and commit pass before any piece
  // is applied (StepTracker::CheckParams / CheckAttempt).
  absl::Status CheckParams(uint64_t step, const StepParams& params) const {
    if (absl::Status s = param_groups_.CheckSettings(params.settings.size());
        !s.ok()) {
      return s;
    }
    return tracker_->CheckParams(step, params);
  }
  absl::Status CheckAttempt(uint64_t attempt) const {
    return tracker_->CheckAttempt(attempt);
  }
  // Received gradient bytes held in memory (buffered pieces, prepared
  // pushes) against the server's limit: TryReserve is false when `bytes`
  // more would pass it; Release gives them back.
  bool TryReservePushBytes(uint64_t bytes) const {
    return store_->TryAddPendingGradBytes(bytes);
  }
  void ReleasePushBytes(int64_t bytes) const {
    store_->AddPendingGradBytes(-bytes);
  }
  uint64_t pending_grad_bytes() const { return store_->pending_grad_bytes(); }
  uint64_t pending_grad_limit() const { return store_->pending_grad_limit(); }
  void set_pending_grad_limit(uint64_t bytes) const {
    store_->set_pending_grad_limit(bytes);
  }
  // Called once if the state is lost (a device error).
  void set_fault_listener(std::function<void(const absl::Status&)> f) const {
    store_->set_fault_listener(std::move(f));
  }

  // SetMasterWeights: writes `range` (owned) from FP32 or BF16 `data`.
  absl::Status WriteWeights(FlatRange range, DType dtype,
                            const void* data) const;
  // SetWeights with a state slot: its index by name (InspectResponse's
  // state_slots), INVALID_ARGUMENT naming the slots there are otherwise.
  absl::StatusOr<size_t> StateSlotIndex(absl::string_view name) const;
  // Writes `range` (owned) of FP32 state slot `slot` from FP32 `data`.
  absl::Status WriteStateSlot(FlatRange range, size_t slot,
                              const float* data) const;
  // SetWeights' optimizer_step: every chunk's Adam step count.
  absl::Status SetAdamSteps(uint64_t adam_t) const;
  // Elements AdamW has updated since Create (skipped steps and duplicate
  // pushes excluded): the optimizer's work, for the metrics.
  uint64_t updated_elems() const { return updated_elems_.load(); }

  // INVALID_ARGUMENT unless [offset, offset + length) lies inside the owned
  // range; `what` names the thing checked in the message.
  absl::Status CheckOwned(uint64_t offset, uint64_t length,
                          absl::string_view what) const;
  // "element E of tensor 'NAME' (flat offset F)", or the unit whose padding
  // holds F: for messages about one element.
  std::string DescribeElement(uint64_t offset) const;

  // PERMISSION_DENIED unless [offset, offset + length) (owned) lies inside
  // worker `worker`'s partitions (FlatLayout::WorkerUnitRange with the run's
  // num_workers): a worker pushes only its own part of every unit. With
  // length 0, only that `worker` is a member of the run.
  absl::Status CheckPusher(uint32_t worker, uint64_t offset,
                           uint64_t length) const;

  // Claims, applies and completes one push of `pieces` (pairwise disjoint,
  // inside the owned range) for `step` (see StepTracker for the rules).
  // `attempt` is the pushing workers' incarnation (StepTracker::Claim).
  absl::StatusOr<ApplyResult> ApplyPush(uint64_t step, const StepParams& params,
                                       absl::Span<const GradPiece> pieces,
                                       uint64_t attempt = 0);

  // Two-phase commit (docs/DESIGN.md, "Crash recovery"). Prepare holds
  // `push` (replacing an earlier one of the same step, attempt and worker)
  // and returns 0; when every chunk it covers has applied its step already
  // (a retried stream) it holds nothing and returns the elements it covers,
  // acknowledged as duplicates. Refused, changing nothing (its bytes are
  // released, the attempt stays): ABORTED when a newer attempt was seen or
  // a chunk it covers is past the step or not yet at it; INVALID_ARGUMENT
  // when another worker prepared the same step with another coefficient or
  // skip flag. Holding a push of a newer attempt or step drops the older
  // ones.
  absl::StatusOr<uint64_t> Prepare(PreparedPush push);
  // Applies every push prepared for (step, attempt) as one commit.
  // Refused, changing nothing (no prepared push dropped, the attempt as it
  // was): ABORTED for an older attempt or a step ahead of the chunks;
  // FAILED_PRECONDITION unless the pushes cover every element of the chunks
  // still at version `step`. OK with nothing applied when no chunk is at
  // `step` any more.
  absl::StatusOr<ApplyResult> ApplyPrepared(uint64_t step, uint64_t attempt);
  using PreparedSummary = PreparedPushes::Summary;
  PreparedSummary prepared() const { return prepared_->Summarize(); }

  // The step log (server/step_log.h, docs/DESIGN.md "Replicas"): from
  // OpenStepLog on, every push this copy applies for a step >= from_step is
  // kept, so that a copy restored at version from_step can apply the same
  // pushes (ApplyPush) and reach the same bits. OpenStepLog holds pushes out
  // while it checks that no chunk has applied any of from_step yet
  // (FAILED_PRECONDITION otherwise). The log is bounded by the copy's own
  // state bytes, at least 64 MiB.
  absl::Status OpenStepLog(uint64_t from_step);
  absl::StatusOr<std::vector<std::shared_ptr<const LoggedPush>>> ReadStepLog(
      uint64_t from_step) const {
    return step_log_->Read(from_step);
  }
  void CloseStepLog() const { step_log_->Close(); }
  uint64_t step_log_bytes() const { return step_log_->bytes(); }

  // Replaces the whole state with a restored one: master and the rule's
  // slots (its order) over the owned range (owned().size() elements each), every chunk at version
  // `step` with Adam step count `adam_t`; prepared pushes are dropped. Holds
  // out pushes and arming for the call, so it succeeds whole or changes
  // nothing: FAILED_PRECONDITION (CheckRestorable) before any byte is
  // written.
  // 8-bit slots quantize the values (ShardStore::WriteState).
  absl::Status RestoreState(uint64_t step, uint64_t adam_t,
                            const float* master,
                            absl::Span<const float* const> slots);
  // The same from slot images of a file this range wrote, bit for bit
  // (ShardStore::WriteStateImages).
  absl::Status RestoreStateImages(uint64_t step, uint64_t adam_t,
                                  const float* master,
                                  absl::Span<const void* const> images);
  // FAILED_PRECONDITION while a snapshot is in progress or a step is partly
  // applied: a restore would be refused.
  absl::Status CheckRestorable() const;

  // Arms a snapshot of version `step` written under `directory` ("" keeps
  // it in memory), or returns the one armed (or finished) for the same
  // (step, directory) before. FAILED_PRECONDITION when a chunk is past
  // `step` (StepTracker::ArmCapture). Chunks already at `step` are copied
  // on the snapshot's own thread after this returns.
  absl::StatusOr<std::shared_ptr<ShardSnapshot>> ArmSnapshot(
      uint64_t step, const std::string& directory);
  // The armed or recently finished snapshot of (step, directory), or null.
  std::shared_ptr<ShardSnapshot> FindSnapshot(
      uint64_t step, const std::string& directory) const;
  // A snapshot is armed and not yet complete.
  bool SnapshotInProgress() const;
  // The header a snapshot of this shard starts from.
  v1::ShardCheckpointHeader CheckpointHeader() const;

 private:
  ModelShard(FlatLayout layout) : layout_(std::move(layout)) {}
  // ApplyPush with restore_mu_ held (shared).
  absl::StatusOr<ApplyResult> ApplyPushLocked(
      uint64_t step, const StepParams& params,
      absl::Span<const GradPiece> pieces, uint64_t attempt)
      ABSL_SHARED_LOCKS_REQUIRED(restore_mu_);
  // Applies the claimed segments (`elems` elements in all) on the apply
  // thread pool; the segments of whole tensors through ApplyWholeTensors.
  void ApplyClaimed(const StepClaim& claim, const StepParams& params,
                    absl::Span<const GradPiece> pieces, uint64_t elems);

  // A tensor a group's tensor rule updates whole (docs/DESIGN.md, "Rules
  // for whole tensors"); inside the owned range.
  struct WholeTensor {
    std::string name;
    FlatRange range;
    TensorRule rule;
    const WholeTensorRule* update = nullptr;  // the rule's, by name
    TensorPlan plan;                          // the rule's view of it
  };
  // The tensors of groups with a tensor rule that lie in the owned range;
  // INVALID_ARGUMENT / FAILED_PRECONDITION naming the tensor for one of a
  // rank its rule does not take, one whose state does not fit the
  // element-wise rule's `slots` slots, one cut by a group range or one that
  // straddles this server's range.
  static absl::StatusOr<std::vector<WholeTensor>> FindWholeTensors(
      const v1::OptimizerConfig& optimizer, const FlatLayout& layout,
      FlatRange owned, size_t slots);
  // FAILED_PRECONDITION naming the tensor unless every whole tensor that
  // `pieces` touch is covered by them entirely: its update needs all of
  // its gradient in one apply.
  // RestoreState's work: `write` with pushes and arming held out.
  absl::Status RestoreWith(uint64_t step, uint64_t adam_t,
                           absl::FunctionRef<absl::Status()> write);
  absl::Status CheckWholeTensorsCovered(
      absl::Span<const GradPiece> pieces) const;
  // The tensor rule's update of each whole tensor the claim covers.
  void ApplyWholeTensors(const StepClaim& claim, const StepParams& params,
                         absl::Span<const GradPiece> pieces);

  v1::InitRequest request_;
  FlatLayout layout_;
  OptimizerConfig optimizer_;
  ParamGroupTable param_groups_;
  std::vector<WholeTensor> whole_tensors_;  // sorted by offset
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<StepTracker> tracker_;
  // After store_ and tracker_, which they point into.
  std::unique_ptr<PreparedPushes> prepared_;
  std::unique_ptr<SnapshotArming> snapshots_;
  std::unique_ptr<StepLog> step_log_;
  std::atomic<uint64_t> updated_elems_{0};  // see updated_elems()

  // Held shared by every call that changes the state, exclusively by
  // RestoreState. Taken before any other lock of this class.
  mutable absl::Mutex restore_mu_;
  // Serialises ApplyPrepared calls: a second call for the same step (a
  // retried ApplyStep, or the launcher's next to rank 0's) waits for the
  // first and then finds the step applied, instead of finding the prepared
  // pushes taken and the chunks not yet complete. Taken before restore_mu_.
  absl::Mutex apply_step_mu_;
};

// INVALID_ARGUMENT unless the coefficient is finite, >= 0 and finite as a
// float.
absl::Status ValidateCoefficient(double coefficient);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_MODEL_SHARD_H_
