// PreparedPushes: the pushes a shard holds between the two phases of a
// step's commit (docs/DESIGN.md, "Crash recovery"). Workers' pushes
// committed with prepare are validated whole and held here; rank 0's
// ApplyStep takes every one of (step, attempt) and the shard applies them as
// one commit. Each held push's bytes stay counted in the store's pending
// gradient bytes until it is applied or dropped.
//
// Thread-safe. The caller (ModelShard) holds its restore lock shared around
// Prepare and Take, exclusively around Clear.
#ifndef ZEROSHARD_SERVER_PREPARED_PUSHES_H_
#define ZEROSHARD_SERVER_PREPARED_PUSHES_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "server/shard_store.h"
#include "server/step_tracker.h"

namespace zeroshard {

// A validated slice of gradient for one push; `data` holds range.size()
// elements of dtype (FP32 or BF16) and outlives the call.
struct GradPiece {
  FlatRange range;
  DType dtype = DType::kFp32;
  const void* data = nullptr;
};

// One worker's push committed with prepare (two-phase commit): validated,
// whole, and held until ApplyPrepared.
struct PreparedPush {
  uint64_t step = 0;
  uint64_t attempt = 0;
  uint32_t worker = 0;
  StepParams params;
  std::vector<GradPiece> pieces;       // views into what `holder` keeps
  std::shared_ptr<const void> holder;
  int64_t pending_bytes = 0;           // counted in the store's pending bytes
};

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

class PreparedPushes {
 public:
  // The pointers must outlive this.
  PreparedPushes(ShardStore* store, StepTracker* tracker)
      : store_(store), tracker_(tracker) {}

  // Holds `push` (replacing an earlier one of the same step, attempt and
  // worker) and returns 0; when every chunk it covers has applied its step
  // already (a retried stream) it holds nothing and returns the elements it
  // covers, acknowledged as duplicates. Refused, changing nothing (its bytes
  // are released, the attempt stays): ABORTED when a newer attempt was seen
  // or a chunk it covers is past the step or not yet at it;
  // INVALID_ARGUMENT when another worker prepared the same step with another
  // coefficient or skip flag. Holding a push of a newer attempt or step
  // drops the older ones.
  absl::StatusOr<uint64_t> Prepare(PreparedPush push);

  // Takes every push held for (step, attempt), after checking that they
  // cover every element of the chunks still at version `step`; an empty
  // result: no chunk is at `step` any more (applied already). Refused,
  // taking nothing: ABORTED for a step ahead of the chunks;
  // FAILED_PRECONDITION when the pushes do not cover the chunks;
  // INVALID_ARGUMENT when they disagree on the coefficient. The caller
  // applies them and then releases their pending bytes.
  absl::StatusOr<std::vector<PreparedPush>> Take(uint64_t step,
                                                 uint64_t attempt);

  // Drops the pushes that can never apply: every chunk they cover is past
  // their step (a plain commit or another apply completed it).
  void DropApplied() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every push (a restore replaced the state they were made against).
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  struct Summary {
    uint64_t elems = 0, step = 0, attempt = 0;
  };
  Summary Summarize() const;

 private:
  // Drops pushes older than (step, attempt), releasing their bytes.
  void DropBefore(uint64_t step, uint64_t attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Elements of `pieces` in chunks at version `step` (*at_step) and at
  // `step` + 1 (*applied); ABORTED when a chunk is at neither.
  absl::Status Classify(uint64_t step, absl::Span<const GradPiece> pieces,
                        uint64_t* at_step, uint64_t* applied) const;

  ShardStore* const store_;
  StepTracker* const tracker_;
  mutable absl::Mutex mu_;
  std::vector<PreparedPush> prepared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_PREPARED_PUSHES_H_
