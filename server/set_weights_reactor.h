// The client-streaming SetWeights call (admin), all or nothing, on the raw
// (ByteBuffer) callback API. Every message is parsed as a WeightPiece
// (INVALID_ARGUMENT naming SetWeights when it does not parse) and validated
// (FP32 or BF16, a whole number of elements, at most kMaxPiecePayloadBytes,
// inside the owned range, overlapping no other piece of the stream) and
// buffered; nothing is written until the client half-closes. Then every
// piece is written to master and mirror and the call answers OK with the
// elements written. An invalid piece, a cancelled or broken stream, or a
// server that is not initialised ends the call with an error and writes
// nothing. m, v, versions and the Adam step count are unchanged.
//
// The buffered bytes are bounded by the owned range: pieces do not overlap
// and lie inside it, so at most owned elements × 4 bytes (FP32) are held.
#ifndef ZEROSHARD_SERVER_SET_WEIGHTS_REACTOR_H_
#define ZEROSHARD_SERVER_SET_WEIGHTS_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/status_reactor.h"
#include "server/rpc_counters.h"
#include "server/model_shard.h"
#include "server/stream_pieces.h"

namespace zeroshard {

class SetWeightsReactor
    : public StatusReactor<grpc::ServerReadReactor<grpc::ByteBuffer>> {
 public:
  // The caller is already authorized (server/authorizer.h). `response`
  // belongs to gRPC; it is filled with a serialized SetWeightsResponse.
  SetWeightsReactor(grpc::CallbackServerContext* context,
                    absl::StatusOr<std::shared_ptr<ModelShard>> state,
                    grpc::ByteBuffer* response, RpcCounters* counters);

  void OnReadDone(bool ok) override;
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override;

 private:
  // Parses, validates and buffers the message just read.
  absl::Status Buffer();
  // Writes every buffered piece; the elements written.
  absl::StatusOr<uint64_t> Apply();
  void End(const absl::Status& status);

  grpc::CallbackServerContext* const context_;
  absl::StatusOr<std::shared_ptr<ModelShard>> state_;
  grpc::ByteBuffer* const response_;
  RpcCounters* const counters_;
  // Reads, OnCancel and OnDone are serialised by gRPC for one stream.
  std::atomic<bool> cancelled_{false};
  grpc::ByteBuffer message_;
  StreamPieces pieces_{"SetWeights", "; nothing is written"};
  // The stream's array (WeightPiece.state, from its first piece): the
  // master weights, or this state slot.
  bool have_state_ = false;
  std::string state_name_;
  std::optional<size_t> slot_;
  std::optional<uint64_t> optimizer_step_;  // WeightPiece.optimizer_step
  absl::Status result_;
  bool recorded_ = false;  // result_ already counted
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SET_WEIGHTS_REACTOR_H_
