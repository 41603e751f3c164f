// The Checkpoint call with wait = true: finishes once the shard file of an
// armed snapshot is written (OK with its path, size and checksum, or the
// write's error), or DEADLINE_EXCEEDED / CANCELLED when the call ends first
// (the snapshot goes on). No thread blocks while waiting. The reply is
// filled and serialised as the call finishes (server/raw_messages.h).
#ifndef ZEROSHARD_SERVER_CHECKPOINT_WAIT_REACTOR_H_
#define ZEROSHARD_SERVER_CHECKPOINT_WAIT_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/raw_messages.h"
#include "server/rpc_counters.h"
#include "server/shard_snapshot.h"

namespace zeroshard {

// Fills a Checkpoint response from a snapshot's result.
void FillCheckpointResponse(const ShardSnapshot& snap,
                            const SnapshotResult* result,
                            v1::CheckpointResponse* response);

class CheckpointWaitReactor : public grpc::ServerUnaryReactor {
 public:
  CheckpointWaitReactor(grpc::CallbackServerContext* context,
                        std::shared_ptr<ShardSnapshot> snap,
                        UnaryReply<v1::CheckpointResponse> reply,
                        RpcCounters* counters);

  void OnCancel() override;
  void OnDone() override;

 private:
  void OnWritten(const absl::StatusOr<SnapshotResult>& result);
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<ShardSnapshot> snap_;
  // Finished by whoever sets finished_.
  UnaryReply<v1::CheckpointResponse> reply_;
  RpcCounters* const counters_;
  std::atomic<int> refs_{2};  // gRPC's OnDone and the snapshot's waiter

  absl::Mutex mu_;
  uint64_t waiter_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_CHECKPOINT_WAIT_REACTOR_H_
