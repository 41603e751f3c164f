// One worker's gradient push for one step, streamed while backward runs.
//
// A PushSession sends each added range to the servers that own it, as it is
// added: the first Add touching server k opens a PushGrad stream to k (its
// header carries step, worker and, where known up front, the coefficient and
// skip flag) and a sender thread that writes pieces of at most
// max_message_bytes straight from the caller's buffer (no copy). Commit sends
// the commit message on every open stream (unless the coefficient came up
// front), closes them and waits for the replies.
//
//   ASSIGN_OR_RETURN(auto push, client.OpenPush(step, rank));
//   for each unit u in backward: RETURN_IF_ERROR(push->Add(range_u,
//                                                 DType::kFp32, grad_u));
//   ASSIGN_OR_RETURN(PushResult r, push->Commit({coefficient, skip}));
//
// Contracts:
// - Data passed to Add must stay valid and unchanged until Commit or Abort
//   returns (a stream retried after UNAVAILABLE is re-sent from the start,
//   which the server acknowledges as duplicates).
// - Ranges added to one session must not overlap.
// - Add never blocks on the network; it returns the first error a stream has
//   already met, if any (e.g. ABORTED for a stale step), so the caller can
//   stop early.
// - Errors carry the server address. UNAVAILABLE is retried per stream under
//   the client's RetryPolicy; other codes are returned as they are.
// - One thread drives a session (Add/Commit/Abort are not concurrent). The
//   destructor aborts a session that was not committed.
#ifndef ZEROSHARD_CLIENT_PUSH_SESSION_H_
#define ZEROSHARD_CLIENT_PUSH_SESSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/optimizer_config.h"

namespace zeroshard {

class ShardChannels;
class ServerPushStream;

// The step's gradient coefficient (1/loss_scale * clip factor, finite, >= 0)
// and overflow flag.
struct StepCommit {
  double coefficient = 1.0;
  bool skip = false;
  // Two-phase commit: the servers hold the pieces until ApplyStep
  // (client/apply_step.h); the push's result then counts nothing applied.
  bool prepare = false;
  // This step's hyper-parameters, one per parameter group the servers hold
  // (common/optimizer_config.h StepSetting); empty: the schedule's.
  std::vector<StepSetting> settings;
};

// INVALID_ARGUMENT unless the coefficient is finite and >= 0.
absl::Status ValidateStepCommit(const StepCommit& commit);

// A gradient slice in the caller's memory.
struct GradSpan {
  FlatRange range;
  DType dtype = DType::kFp32;
  const void* data = nullptr;
};

// Summed over the servers of one push.
struct PushResult {
  uint64_t applied_elems = 0;
  uint64_t duplicate_elems = 0;
  uint64_t chunks_completed = 0;
  int streams = 0;
};

class PushSession {
 public:
  ~PushSession();
  PushSession(const PushSession&) = delete;
  PushSession& operator=(const PushSession&) = delete;

  uint64_t step() const { return step_; }
  uint32_t worker() const { return worker_; }

  // Queues `range` (elements of `dtype`, FP32 or BF16, at `data`) for
  // sending. INVALID_ARGUMENT for a bad range/dtype/null data or overlap with
  // an earlier Add; FAILED_PRECONDITION after Commit/Abort; or the first
  // error a stream has met.
  absl::Status Add(const FlatRange& range, DType dtype, const void* data);

  // Finishes every stream with `commit` and waits for the servers' replies.
  // For a session opened with a known coefficient, `commit` must equal it.
  // The same as SendCommit followed by Wait.
  absl::StatusOr<PushResult> Commit(const StepCommit& commit);
  // Sends `commit` as every stream's last message without waiting: the
  // caller may start other work (e.g. fetching the next version, which the
  // servers serve chunk by chunk as they apply this commit) and then Wait.
  absl::Status SendCommit(const StepCommit& commit);
  // Waits for the servers' replies to a sent commit.
  absl::StatusOr<PushResult> Wait();

  // Cancels every stream; nothing uncommitted is applied. Idempotent.
  void Abort();

 private:
  friend class ShardClient;
  PushSession(const ShardChannels* channels, const FlatLayout* layout,
              uint64_t step, uint32_t worker, std::optional<StepCommit> known);

  absl::Status FirstStreamError() const;
  // The error of slot `slot`'s streams so far: OK while each has none, or
  // while a copy is lost (CopyLost) beside one that has none.
  absl::Status SlotError(
      int slot,
      const std::vector<std::unique_ptr<ServerPushStream>>& copies) const;

  const ShardChannels* channels_;
  const FlatLayout* layout_;
  const uint64_t step_;
  const uint32_t worker_;
  const std::optional<StepCommit> known_;
  bool finished_ = false;
  bool commit_sent_ = false;
  std::vector<FlatRange> added_;  // sorted by begin
  // Per slot, one per live copy (ShardChannels::LiveHolders), opened on
  // first use.
  std::vector<std::vector<std::unique_ptr<ServerPushStream>>> streams_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_PUSH_SESSION_H_
