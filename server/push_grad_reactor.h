// The client-streaming PushGrad call on the raw (ByteBuffer) callback API:
// reads messages one at a time, decodes each with DecodePushGradMessage (a
// piece's gradient bytes stay in the received slices: no copy) into a
// PushReceiver, and finishes with its response once the commit is
// applied, or with the first error. A stream cut off before its commit
// (client cancel, disconnect, half-close without commit) applies nothing:
// the session and its buffers are destroyed with the reactor.
#ifndef ZEROSHARD_SERVER_PUSH_GRAD_REACTOR_H_
#define ZEROSHARD_SERVER_PUSH_GRAD_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/status/status.h"
#include "wire/push_grad_codec.h"
#include "server/push_receiver.h"
#include "server/rpc_counters.h"
#include "server/model_shard.h"

namespace zeroshard {

class PushGradReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // `response` belongs to gRPC and outlives the reactor's Finish; it is
  // filled with a serialized PushGradResponse.
  PushGradReactor(std::shared_ptr<ModelShard> state,
                  grpc::ByteBuffer* response, RpcCounters* counters);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  void End(const absl::Status& status);

  // Reads and OnDone never overlap: gRPC serialises the reactions of a
  // stream, and there is one read at a time, so no lock is needed.
  PushReceiver session_;
  grpc::ByteBuffer* const response_;
  RpcCounters* const counters_;
  grpc::ByteBuffer message_;
  ReceivedPushGrad decoded_;
  absl::Status result_;
  bool recorded_ = false;  // result_ already counted
  uint64_t counted_bytes_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_PUSH_GRAD_REACTOR_H_
