#include "server/checkpoint_wait_reactor.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/grpc_status.h"

namespace zeroshard {

void FillCheckpointResponse(const ShardSnapshot& snap,
                            const SnapshotResult* result,
                            v1::CheckpointResponse* response) {
  response->set_step(snap.step());
  *response->mutable_owned() = snap.header().owned();
  response->set_done(result != nullptr);
  if (result == nullptr) return;
  response->set_path(result->path);
  response->set_bytes(result->bytes);
  response->set_checksum(result->checksum);
  response->set_copy_seconds(result->copy_seconds);
  response->set_write_seconds(result->write_seconds);
  *response->mutable_optimizer() = snap.header().optimizer();
}

CheckpointWaitReactor::CheckpointWaitReactor(
    grpc::CallbackServerContext* context, std::shared_ptr<ShardSnapshot> snap,
    UnaryReply<v1::CheckpointResponse> reply, RpcCounters* counters)
    : context_(context),
      snap_(std::move(snap)),
      reply_(std::move(reply)),
      counters_(counters) {
  // Called at once (before AddWaiter returns) when the file is written.
  const uint64_t id = snap_->AddWaiter(
      [this](const absl::StatusOr<SnapshotResult>& r) { OnWritten(r); });
  absl::MutexLock lock(&mu_);
  if (!finished_) waiter_id_ = id;
}

void CheckpointWaitReactor::OnWritten(
    const absl::StatusOr<SnapshotResult>& result) {
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    if (!finished_) {
      finished_ = finish = true;
      waiter_id_ = 0;
      FillCheckpointResponse(*snap_, result.ok() ? &*result : nullptr,
                             reply_.message());
    }
  }
  if (finish) {
    counters_->RecordResult(result.status());
    reply_.Finish(this, result.status());
  }
  Unref();
}

void CheckpointWaitReactor::OnCancel() {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || waiter_id_ == 0) return;  // finished, or finishing
    if (!snap_->CancelWaiter(waiter_id_)) return;  // its callback finishes
    waiter_id_ = 0;
    finished_ = true;
    const bool expired =
        context_->deadline() <= std::chrono::system_clock::now();
    const std::string text = absl::StrCat(
        "Checkpoint of step ", snap_->step(), ": ",
        expired ? "the deadline passed" : "cancelled",
        " before the shard file was written (the snapshot goes on)");
    status = expired ? absl::DeadlineExceededError(text)
                     : absl::CancelledError(text);
  }
  counters_->RecordResult(status);
  reply_.Finish(this, status);
  Unref();  // the waiter's reference: it will never be called
}

void CheckpointWaitReactor::OnDone() { Unref(); }

}  // namespace zeroshard
