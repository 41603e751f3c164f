// The server side of one PushGrad stream, without gRPC: validates each
// message as it arrives, buffers gradient pieces until the commit (or
// applies them at once when the header carried the coefficient), and
// applies the commit through ModelShard.
//
//   PushReceiver session(state);
//   for (each message m) RETURN_IF_ERROR(session.OnMessage(std::move(m)));
//   ... until session.finished(); or, when the client half-closes,
//   RETURN_IF_ERROR(session.OnEndOfStream());
//   reply with session.response();
//
// Message order: one header first, then pieces, then (unless
// header.coefficient_known) one commit, which finishes the session. Any
// message is validated completely before memory is touched: pieces must be
// FP32 or BF16, hold a whole number of elements (at most
// kMaxPiecePayloadBytes), lie inside the owned range and not overlap another
// piece of the stream. Each piece's largest magnitude is read as it arrives
// (optim/grad_scan.h, while its bytes are still in cache); a step that is
// not skipped is refused, nothing of the stream applied, when a piece holds
// NaN or Inf or a value that the coefficient scales past kMaxScaledGrad.
// Buffered pieces are freed when the session is
// destroyed; a session destroyed before its commit applies nothing.
// A piece's bytes are never copied here: they stay with the owner they
// arrived in (received gRPC slices, or the proto's string) until applied.
// A piece in a shared-memory region (PushGradRegionPiece) is read from the
// region when it is applied at once, and copied out of it when it waits for
// a commit, so that the client may reuse its region once the push is over.
// Not thread-safe: one stream, one caller at a time.
#ifndef ZEROSHARD_SERVER_PUSH_RECEIVER_H_
#define ZEROSHARD_SERVER_PUSH_RECEIVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "wire/push_grad_codec.h"
#include "server/model_shard.h"
#include "server/shared_regions.h"

namespace zeroshard {

class PushReceiver {
 public:
  // `regions`, when given, serves pieces in shared memory (it outlives the
  // receiver); without it such a piece is FAILED_PRECONDITION.
  explicit PushReceiver(std::shared_ptr<ModelShard> state,
                        const SharedRegions* regions = nullptr);
  ~PushReceiver();
  PushReceiver(const PushReceiver&) = delete;
  PushReceiver& operator=(const PushReceiver&) = delete;

  // Handles the next message; an error ends the stream (nothing buffered is
  // applied). The message's payload is moved out.
  absl::Status OnMessage(v1::PushGradMessage& message);
  // Handles a piece decoded without protobuf (wire/push_grad_codec.h);
  // the same checks and effects as a piece message.
  absl::Status OnPiece(PushGradPieceInput piece);
  // The client half-closed: OK when no commit was expected, otherwise
  // INVALID_ARGUMENT (nothing applied).
  absl::Status OnEndOfStream();
  // True once the commit has been applied.
  bool finished() const { return finished_; }
  // Drops everything buffered and releases its pending-byte count. Called
  // when the stream fails, before the client can see the status, so that a
  // rejected push leaves no trace by the time its caller looks.
  void Discard() { FreeBuffers(); }

  const v1::PushGradResponse& response() const { return response_; }
  // The header, once received (has_header()).
  bool has_header() const { return have_header_; }
  const v1::PushGradHeader& header() const { return header_; }
  uint64_t payload_bytes() const { return payload_bytes_; }

 private:
  // One received piece as element-aligned parts: runs of whole elements in
  // the received segments, and elements split across two segments stitched
  // together in `stitched`.
  struct Buffered {
    std::vector<GradPiece> parts;
    std::vector<uint32_t> stitched;     // holds the stitched parts' data
    std::shared_ptr<const void> owner;  // holds the other parts' data
  };
  static Buffered SplitIntoParts(FlatRange range, DType dtype,
                                 PushGradPieceInput& piece);

  absl::Status OnHeader(const v1::PushGradHeader& header);
  absl::Status OnProtoPiece(v1::PushGradPiece& piece);
  absl::Status OnRegionPiece(const v1::PushGradRegionPiece& piece);
  absl::Status OnCommit(const v1::PushGradCommit& commit);
  absl::Status Apply(const StepParams& params,
                     absl::Span<const GradPiece> pieces);
  // Records the largest magnitude of a piece's parts (and where the first
  // NaN or Inf is).
  void Scan(FlatRange range, const std::vector<GradPiece>& parts);
  // INVALID_ARGUMENT naming the tensor and range when the stream's pieces
  // may not apply with `coefficient` (see the class comment).
  absl::Status CheckMagnitude(double coefficient) const;
  void FreeBuffers();

  std::shared_ptr<ModelShard> state_;
  const SharedRegions* regions_;
  bool have_header_ = false;
  bool finished_ = false;
  v1::PushGradHeader header_;
  // With coefficient_known: the header's parameters (settings included).
  StepParams known_;
  // Ranges received on this stream: begin -> end.
  std::map<uint64_t, uint64_t> ranges_;
  std::vector<Buffered> buffered_;
  int64_t buffered_bytes_ = 0;
  uint64_t payload_bytes_ = 0;
  v1::PushGradResponse response_;
  // What Scan found over the stream's pieces so far.
  bool nonfinite_ = false;
  FlatRange nonfinite_piece_;   // the first piece with a NaN or Inf
  uint64_t nonfinite_at_ = 0;   // and its first such element (flat)
  float max_abs_ = 0;           // the largest finite magnitude
  FlatRange max_abs_piece_;     // the piece that holds it
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_PUSH_RECEIVER_H_
