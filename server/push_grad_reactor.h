// The client-streaming PushGrad call on the raw (ByteBuffer) callback API:
// reads messages one at a time, decodes each with DecodePushGradMessage (a
// piece's gradient bytes stay in the received slices: no copy) into a
// PushReceiver, and finishes with its response once the commit is
// applied, or with the first error. A stream cut off before its commit
// (client cancel, disconnect, half-close without commit) applies nothing:
// the session and its buffers are destroyed with the reactor.
//
// A stream that waits longer than the server's push idle timeout for its
// next message (IdleStreams) is failed with DEADLINE_EXCEEDED ("idle for
// N s"), and its buffered pieces are freed (the pending-gradient budget is
// released) before the status goes out.
#ifndef ZEROSHARD_SERVER_PUSH_GRAD_REACTOR_H_
#define ZEROSHARD_SERVER_PUSH_GRAD_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "wire/push_grad_codec.h"
#include "server/status_reactor.h"
#include "server/idle_streams.h"
#include "server/push_receiver.h"
#include "server/rpc_counters.h"
#include "server/model_shard.h"

namespace zeroshard {

class PushGradReactor
    : public StatusReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>,
                        public IdleStreams::Stream {
 public:
  // `response` belongs to gRPC and outlives the reactor's Finish; it is
  // filled with a serialized PushGradResponse. `idle` (which outlives the
  // call) watches the stream.
  PushGradReactor(std::shared_ptr<ModelShard> state,
                  grpc::ByteBuffer* response, RpcCounters* counters,
                  IdleStreams* idle, const SharedRegions* regions = nullptr);

  void OnReadDone(bool ok) override;
  void OnDone() override;

  bool TakeIfIdle(absl::Time now, absl::Duration timeout) override;
  void Expire(absl::Duration timeout) override;

 private:
  // Records `status` and frees the buffers of a failed stream; false when
  // the stream had ended already. The caller then calls Finish.
  bool EndLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  grpc::ByteBuffer* const response_;
  RpcCounters* const counters_;
  IdleStreams* const idle_;
  // One reference for gRPC (dropped in OnDone), one per Expire to come.
  std::atomic<int> refs_{1};
  // When the pending read started (Unix nanoseconds); 0 while a message
  // is being handled or after the end.
  std::atomic<int64_t> waiting_since_ns_{0};

  // gRPC serialises the reactions of a stream; the lock orders them with
  // an expiry from the idle sweeper.
  absl::Mutex mu_;
  PushReceiver session_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  bool recorded_ ABSL_GUARDED_BY(mu_) = false;  // result_ already counted
  uint64_t counted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ByteBuffer message_;  // owned by the pending read
  ReceivedPushGrad decoded_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_PUSH_GRAD_REACTOR_H_
