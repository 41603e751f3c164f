// The StepLog and Replay calls (docs/DESIGN.md, "Replicas"; the messages in
// proto/zeroshard/v1/shard.proto), on the raw (ByteBuffer) callback API.
//
// StepLogReactor writes the pushes a copy's log kept (ModelShard::
// ReadStepLog) as PushGradMessages: per push one header (coefficient_known,
// with its step, attempt, run, coefficient, skip and group settings), then
// its pieces, none over kMaxPiecePayloadBytes.
//
// ReplayReactor reads such a stream into another copy of the same slot:
// each push is buffered whole (at most the owned range × 4 bytes: its
// pieces are disjoint and owned), validated as PushGrad validates one, and
// applied with ModelShard::ApplyPush when the next header or the end of the
// stream arrives, as the logging copy applied it. A push that is refused
// ends the call; the pushes before it stay applied, so a caller reads the
// copy's version and goes on from there.
#ifndef ZEROSHARD_SERVER_STEP_LOG_REACTORS_H_
#define ZEROSHARD_SERVER_STEP_LOG_REACTORS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/model_shard.h"
#include "server/stream_pieces.h"
#include "server/rpc_counters.h"
#include "server/status_reactor.h"
#include "server/step_log.h"

namespace zeroshard {

class StepLogReactor
    : public StatusReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  // Starts writing at once.
  StepLogReactor(std::vector<std::shared_ptr<const LoggedPush>> pushes,
                 std::string run_id, RpcCounters* counters);

  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  // Writes the next message or finishes; one write in flight at a time.
  void Next();

  const std::vector<std::shared_ptr<const LoggedPush>> pushes_;
  const std::string run_id_;
  RpcCounters* const counters_;
  size_t push_ = 0;
  bool header_sent_ = false;
  size_t piece_ = 0;
  uint64_t piece_pos_ = 0;  // elements of the current piece written
  grpc::ByteBuffer buffer_;
};

class ReplayReactor
    : public StatusReactor<grpc::ServerReadReactor<grpc::ByteBuffer>> {
 public:
  // The caller is already authorized. `response` belongs to gRPC.
  ReplayReactor(grpc::CallbackServerContext* context,
                absl::StatusOr<std::shared_ptr<ModelShard>> state,
                grpc::ByteBuffer* response, RpcCounters* counters);

  void OnReadDone(bool ok) override;
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override;

 private:
  absl::Status OnMessage();
  absl::Status OnHeader(const v1::PushGradHeader& header);
  absl::Status OnPiece(v1::PushGradPiece& piece);
  // Applies the push buffered so far, if any.
  absl::Status ApplyPending();
  void End(const absl::Status& status);

  grpc::CallbackServerContext* const context_;
  absl::StatusOr<std::shared_ptr<ModelShard>> state_;
  grpc::ByteBuffer* const response_;
  RpcCounters* const counters_;
  std::atomic<bool> cancelled_{false};
  grpc::ByteBuffer message_;
  // The push being read.
  bool have_push_ = false;
  uint64_t step_ = 0;
  uint64_t attempt_ = 0;
  StepParams params_;
  StreamPieces pieces_{"Replay", ""};  // the push's
  v1::ReplayResponse reply_;
  absl::Status result_;
  bool recorded_ = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STEP_LOG_REACTORS_H_
