// A copy's log of the pushes it applied from one step on (docs/DESIGN.md,
// "Replicas"): what a replacement restored from an older checkpoint of the
// same slot applies, in the same order, to reach the same bits while
// training goes on (the StepLog and Replay RPCs).
//
//   log.Open(12);                       // keeps pushes of steps >= 12
//   log.Record(claim order...);         // ModelShard, once a push is claimed
//   ASSIGN_OR_RETURN(auto pushes, log.Read(12));
//
// A push is recorded once the step tracker accepted its claim and before its
// chunks complete, so a push that depends on another (the next step on the
// same chunk) is always recorded after it. Each record copies the pieces'
// bytes. The log is bounded (`max_bytes`): a record past the bound drops
// every kept push and marks the log overflowed, and Read then answers
// RESOURCE_EXHAUSTED until it is opened again.
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_STEP_LOG_H_
#define ZEROSHARD_SERVER_STEP_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/prepared_pushes.h"
#include "server/step_tracker.h"

namespace zeroshard {

// One applied push: what ModelShard::ApplyPush was called with. `pieces`
// point into `data`.
struct LoggedPush {
  uint64_t step = 0;
  uint64_t attempt = 0;
  StepParams params;
  std::vector<GradPiece> pieces;
  std::string data;
};

class StepLog {
 public:
  explicit StepLog(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Starts keeping pushes of steps >= from_step, dropping whatever was kept.
  void Open(uint64_t from_step);
  // Stops keeping and drops the log.
  void Close();
  bool is_open() const { return open_.load(std::memory_order_acquire); }

  // Keeps a copy of the push when the log is open and `step` >= its first.
  void Record(uint64_t step, uint64_t attempt, const StepParams& params,
              absl::Span<const GradPiece> pieces);

  // The kept pushes of steps >= from_step, in the order they were recorded;
  // those of earlier steps are dropped. FAILED_PRECONDITION when the log is
  // not open or `from_step` is before the step it was opened at;
  // RESOURCE_EXHAUSTED once it overflowed.
  absl::StatusOr<std::vector<std::shared_ptr<const LoggedPush>>> Read(
      uint64_t from_step);

  // Bytes of piece data kept.
  uint64_t bytes() const;

 private:
  const uint64_t max_bytes_;
  std::atomic<bool> open_{false};
  mutable absl::Mutex mu_;
  uint64_t first_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::shared_ptr<const LoggedPush>> pushes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STEP_LOG_H_
