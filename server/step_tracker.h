// Versions and exactly-once bookkeeping for the chunks of a shard
// (docs/DESIGN.md, "Versions and exactly-once").
//
// Each chunk has a version (global steps applied to all of it) and its own
// Adam step count t (non-skipped steps applied). A push of gradient ranges
// for step s is first *claimed* here, which validates it against the chunk
// versions and records which elements it will apply, and then *completed*
// once the caller has applied the claimed segments to the store:
//
//   ASSIGN_OR_RETURN(StepClaim claim, tracker.Claim(s, params, ranges));
//   ... apply each claimed segment (per chunk: ShardStore::ApplyUpdatesInChunk
//       with MakeAdamStep(cfg, seg.adam_t, coef)) ...
//   uint64_t completed = tracker.Complete(claim);
//
// Rules, per chunk at version v, for a segment of step s:
//   v == s:    elements not yet claimed for s are claimed; elements all
//              claimed already are a duplicate (acknowledged, not applied);
//              a mix is INVALID_ARGUMENT.
//   v == s+1:  the whole chunk was applied for s: a duplicate.
//   v > s+1:   ABORTED (stale step).   v < s: ABORTED (future step).
// The coefficient and skip flag of step s are remembered from its first
// claim; a claim with others is INVALID_ARGUMENT. A claim either succeeds
// as a whole or changes nothing. When every element of a chunk is applied
// for s its version becomes s+1, t grows unless s was skipped, and waiters
// registered with WaitForVersion are called (outside the lock).
//
// Snapshots (server/shard_snapshot.h): ArmCapture(s) marks step s; every
// later claim of step s carries capture = true, and its caller copies the
// claimed chunks before applying anything to them. Arming is refused when a
// chunk is past s or at s with part of step s claimed, so a snapshot never
// misses an update.
//
// Attempts: a claim carries the attempt (incarnation) of the workers that
// sent it; the tracker remembers the highest seen and refuses lower ones, so
// pieces of a replaced worker group never apply once its successor spoke.
// A claim records its attempt only when it succeeds: a refused claim leaves
// the attempt as it was.
//
// Thread-safe. version() may be read without any lock: it is published only
// after the data of the completed step was written (release / acquire).
#ifndef ZEROSHARD_SERVER_STEP_TRACKER_H_
#define ZEROSHARD_SERVER_STEP_TRACKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/layout.h"
#include "common/optimizer_config.h"

namespace zeroshard {

// The agreed multiplier and skip flag of one step.
struct StepParams {
  double coefficient = 1.0;
  bool skip = false;
  // The step's hyper-parameters per parameter group (GroupSetting); empty:
  // the schedule and the groups' own settings.
  std::vector<StepSetting> settings;
};

// A piece of a claim inside one chunk.
struct ClaimedSegment {
  size_t piece = 0;     // index of the range passed to Claim it came from
  FlatRange range;      // global flat range, inside one chunk
  size_t chunk = 0;
  uint64_t adam_t = 1;  // the Adam step count this update uses (chunk t + 1)
};

struct StepClaim {
  uint64_t step = 0;
  bool skip = false;
  // A snapshot is armed at this step: copy each claimed chunk before
  // applying to it.
  bool capture = false;
  std::vector<ClaimedSegment> segments;  // to apply, then Complete()
  uint64_t duplicate_elems = 0;          // acknowledged, not applied
};

class StepTracker {
 public:
  // Chunks of `chunk_elems` (> 0) over `owned`, all at version 0 and t 0.
  StepTracker(FlatRange owned, uint64_t chunk_elems);
  StepTracker(const StepTracker&) = delete;
  StepTracker& operator=(const StepTracker&) = delete;

  size_t num_chunks() const { return num_chunks_; }

  // Validates and claims `ranges` (each inside the owned range; pairwise
  // disjoint — the caller checks both) for `step`. See the rules above.
  absl::StatusOr<StepClaim> Claim(uint64_t step, const StepParams& params,
                                  absl::Span<const FlatRange> ranges,
                                  uint64_t attempt = 0);

  // Records `attempt` as seen; ABORTED when a higher one was seen before.
  // Only a call that is accepted may record its attempt: a handler checks
  // everything else first (CheckAttempt), then notes it.
  absl::Status NoteAttempt(uint64_t attempt);
  // ABORTED when a higher attempt was seen; records nothing.
  absl::Status CheckAttempt(uint64_t attempt) const;
  uint64_t attempt() const;

  // Arms (counted: each ArmCapture needs one DisarmCapture) a capture of
  // version `step`; FAILED_PRECONDITION naming the chunk when one is past it
  // or has part of it claimed. Returns the chunks already at `step` (with
  // nothing claimed), which no claim may ever reach: the caller copies
  // those itself.
  absl::StatusOr<std::vector<size_t>> ArmCapture(uint64_t step);
  void DisarmCapture(uint64_t step);

  // Chunk c's Adam step count t.
  uint64_t adam_t(size_t chunk) const;

  // Sets every chunk to `version` with Adam step counts `adam_t` (one per
  // chunk), forgetting step parameters; waiters whose version is reached
  // are woken. FAILED_PRECONDITION while any chunk has part of a step
  // claimed or a capture is armed.
  absl::Status Reset(uint64_t version, absl::Span<const uint64_t> adam_t);
  // Every chunk's Adam step count becomes `adam_t`; versions and the rest
  // stay. FAILED_PRECONDITION while any chunk has part of a step claimed.
  absl::Status SetAdamSteps(uint64_t adam_t);

  // Checks params against those remembered for `step` (if any) without
  // recording anything.
  absl::Status CheckParams(uint64_t step, const StepParams& params) const;

  // Marks the claim's segments applied; returns the number of chunks whose
  // version advanced.
  uint64_t Complete(const StepClaim& claim);

  uint64_t version(size_t chunk) const {
    return versions_[chunk].load(std::memory_order_acquire);
  }

  struct Summary {
    uint64_t min_version = 0, max_version = 0;
    uint64_t min_adam_step = 0;
    uint64_t partial_chunks = 0;  // part of the step at their version claimed
  };
  Summary Summarize() const;

  // Returns 0 when chunk's version is already >= v. Otherwise registers
  // `wake` to be called once, on the thread that completes the chunk, when
  // it reaches v, and returns the waiter's id (never 0).
  uint64_t WaitForVersion(size_t chunk, uint64_t v, std::function<void()> wake);
  // Unregisters a waiter; false when it has already been called (or is
  // being called).
  bool CancelWait(uint64_t id);

 private:
  struct ChunkState {
    uint64_t adam_t = 0;
    // Claimed ranges of the step at the chunk's version: begin -> end,
    // merged, disjoint.
    std::map<uint64_t, uint64_t> claimed;
    uint64_t applied = 0;  // elements applied for that step
  };
  struct Waiter {
    size_t chunk;
    uint64_t version;
    std::function<void()> wake;
  };

  FlatRange ChunkRange(size_t c) const;
  // Elements of `r` already claimed in chunk c.
  uint64_t ClaimedWithin(const ChunkState& chunk, FlatRange r) const;
  static void AddClaimed(ChunkState& chunk, FlatRange r);
  absl::Status CheckParamsLocked(uint64_t step, const StepParams& params) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckAttemptLocked(uint64_t attempt) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const FlatRange owned_;
  const uint64_t chunk_elems_;
  const size_t num_chunks_;
  // Written under mu_, read anywhere.
  std::unique_ptr<std::atomic<uint64_t>[]> versions_;

  mutable absl::Mutex mu_;
  std::vector<ChunkState> chunks_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, StepParams> params_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, int> capture_steps_ ABSL_GUARDED_BY(mu_);  // step -> arms
  uint64_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STEP_TRACKER_H_
