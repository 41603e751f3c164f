// One PushGrad stream to one server, driven by its own sender thread: the
// internal half of PushSession (client/push_session.h). Pieces are queued as
// pointers into the caller's buffers and written in order; a stream that
// fails with UNAVAILABLE is re-opened and re-sent from its header under the
// client's RetryPolicy.
#ifndef ZEROSHARD_CLIENT_SERVER_PUSH_STREAM_H_
#define ZEROSHARD_CLIENT_SERVER_PUSH_STREAM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/push_session.h"
#include "client/shard_channels.h"
#include "common/dtype.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// A piece of caller memory to send: elements of `dtype` from `offset`.
struct QueuedPiece {
  uint64_t offset = 0;
  DType dtype = DType::kFp32;
  const void* data = nullptr;
  size_t bytes = 0;
};

class ServerPushStream {
 public:
  // Starts the sender thread, which opens the stream at once: a push of
  // slot `slot`'s pieces to `server`, one of its copies (ShardChannels).
  ServerPushStream(const ShardChannels* channels, int slot, int server,
                   uint64_t step, uint32_t worker,
                   std::optional<StepCommit> known);
  int server() const { return server_; }
  // Cancels and joins.
  ~ServerPushStream();

  void Enqueue(const std::vector<QueuedPiece>& pieces);
  // Asks the stream to send the commit (unless known up front) and close.
  void Close(const StepCommit& commit);
  // Cancels the call; the result becomes CANCELLED unless already final.
  void Cancel();
  // Joins the sender thread; the server's reply or the stream's error.
  absl::StatusOr<v1::PushGradResponse> Wait();
  // The stream's terminal error if it has failed already, OK otherwise.
  absl::Status error() const;

 private:
  void Run();
  absl::Status Attempt(v1::PushGradResponse* response);

  // Constant after construction.
  const ShardChannels* channels_;
  const int slot_;
  const int server_;
  const uint64_t step_;
  const uint32_t worker_;
  const std::optional<StepCommit> known_;
  const std::string what_;

  mutable absl::Mutex mu_;
  std::vector<QueuedPiece> pieces_ ABSL_GUARDED_BY(mu_);
  std::optional<StepCommit> commit_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Status error_ ABSL_GUARDED_BY(mu_);

  absl::StatusOr<v1::PushGradResponse> result_;  // written by the thread
  std::thread thread_;
  bool joined_ = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SERVER_PUSH_STREAM_H_
