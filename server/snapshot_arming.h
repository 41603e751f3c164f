// SnapshotArming: the snapshots armed on one shard and the few newest
// finished ones (docs/DESIGN.md, "Checkpoints"). Arming tells the tracker to
// mark the first claim of each chunk at the snapshot's step; the applying
// thread then copies the chunk here before it changes (CaptureClaimed), and a
// chunk that a commit completes to an armed step is copied at once
// (CaptureCompleted). Chunks already at the step are copied on the
// snapshot's own thread. A file of a host store is streamed from the store
// instead (server/shard_snapshot.h): chunks at the step are only marked, and
// the captures stay armed until its writer has read them all.
//
// Thread-safe. The caller (ModelShard) holds its restore lock shared around
// Arm and around the applies that capture.
#ifndef ZEROSHARD_SERVER_SNAPSHOT_ARMING_H_
#define ZEROSHARD_SERVER_SNAPSHOT_ARMING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard/v1/checkpoint.pb.h"
#include "server/shard_snapshot.h"
#include "server/shard_store.h"
#include "server/step_tracker.h"

namespace zeroshard {

class SnapshotArming {
 public:
  // The pointers must outlive this.
  SnapshotArming(ShardStore* store, StepTracker* tracker)
      : store_(store), tracker_(tracker) {}
  // Stops the snapshots' threads, which read the store.
  ~SnapshotArming();

  // Arms a snapshot of version `step` written under `directory` ("" keeps
  // it in memory) from `header` (the shard's), or returns the one armed (or
  // finished) for the same (step, directory) before. FAILED_PRECONDITION
  // when a chunk is past `step` (StepTracker::ArmCapture),
  // RESOURCE_EXHAUSTED when the copy cannot be allocated.
  absl::StatusOr<std::shared_ptr<ShardSnapshot>> Arm(
      uint64_t step, const std::string& directory,
      v1::ShardCheckpointHeader header);
  // The armed or recently finished snapshot of (step, directory), or null.
  std::shared_ptr<ShardSnapshot> Find(uint64_t step,
                                      const std::string& directory) const;
  // A snapshot is armed and not yet complete.
  bool InProgress() const;
  // Forgets the finished in-memory snapshots (directory ""): after the
  // state was written out of band (SetWeights) they no longer show it, and
  // the next read arms a fresh copy of the same step.
  void ForgetFinishedInMemory();
  // Some snapshot is armed (cheap: an atomic load).
  bool any_armed() const { return armed_.load() > 0; }

  // Before anything of the claim's step touches its chunks: copies them
  // into every snapshot armed at that step (claim.capture set).
  void CaptureClaimed(const StepClaim& claim);
  // After the claim completed chunks: copies those now at a version a
  // snapshot is armed at.
  void CaptureCompleted(const StepClaim& claim);

 private:
  // Bytes of one copy of the owned range: master and each slot's image.
  uint64_t SnapshotBytes() const;
  // The snapshots armed at `step` and not yet complete.
  std::vector<std::shared_ptr<ShardSnapshot>> ArmedAt(uint64_t step) const;
  // Finishes `snap` when `last` (its last chunk was just copied).
  void FinishIfLast(ShardSnapshot& snap, bool last);
  // Ends one arming at `step`: claims of it no longer capture for it.
  void Disarm(uint64_t step);

  ShardStore* const store_;
  StepTracker* const tracker_;
  std::atomic<int> armed_{0};  // snapshots armed and not yet complete
  // Armed snapshots and the few newest finished ones, oldest first. Held
  // from arming a capture in the tracker until the snapshot is listed, so
  // that a claim marked capture always finds it.
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<ShardSnapshot>> snapshots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SNAPSHOT_ARMING_H_
