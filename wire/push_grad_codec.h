// PushGradMessage, both directions, without copying gradient bytes:
//
// - The client (client/server_push_stream.cc) encodes a piece with
//   EncodePushPiece as a grpc::ByteBuffer of two slices: a small encoded
//   prefix and the caller's data, referenced, not copied. The transport
//   writes it straight from the caller's buffer.
// - The server (server/push_grad_reactor.cc) reads each received message with
//   DecodePushGradMessage. For the canonical piece form that EncodePushPiece
//   writes, it records where the data lies in the received slices (a 1 MiB
//   piece usually spans several) and keeps them alive; nothing is copied. Any
//   other message (header, commit, fields repeated, unknown fields, a
//   malformed encoding) is handed to protobuf's own parser, so the accepted
//   wire format and its semantics are exactly those of shard.proto.
//
//   auto release = std::make_shared<InFlightBytes>();
//   grpc::ByteBuffer msg = EncodePushPiece(offset, DType::kBf16, ptr, bytes,
//                                          release);
//   // ... release->bytes() drops by `bytes` once gRPC lets go of the data.
//
//   ReceivedPushGrad in;
//   RETURN_IF_ERROR(DecodePushGradMessage(msg, &in));
//   if (in.is_piece) { use in.piece } else { use in.message }
//
// Tests (tests/wire/) check both against protobuf's own serializer and
// parser, and each against the other.
#ifndef ZEROSHARD_WIRE_PUSH_GRAD_CODEC_H_
#define ZEROSHARD_WIRE_PUSH_GRAD_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// Largest payload of one PushGrad piece (in its message or in a region) or
// WeightPiece that a server accepts.
inline constexpr size_t kMaxPiecePayloadBytes = size_t{4} << 20;

// ---- Encoding (client) ------------------------------------------------------

// Bytes of caller data referenced by messages that gRPC has not released yet.
class InFlightBytes {
 public:
  void Add(size_t n);
  void Release(size_t n);
  size_t bytes() const;
  // Waits until bytes() + n <= cap (or bytes() == 0, so one oversized message
  // can always go), up to `deadline`. False on timeout.
  bool WaitForRoom(size_t n, size_t cap, absl::Time deadline);

 private:
  mutable absl::Mutex mu_;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// PushGradMessage{piece: {offset, dtype, data}} referencing `data` (which must
// stay valid until gRPC releases it: until the call has finished). When
// `in_flight` is given, `bytes` is added to it now and released when gRPC
// drops its last reference to the data.
grpc::ByteBuffer EncodePushPiece(uint64_t offset, DType dtype,
                                 const void* data, size_t bytes,
                                 const std::shared_ptr<InFlightBytes>& in_flight);

// ---- Decoding (server) ------------------------------------------------------

// A gradient piece whose bytes lie, in order, in `segments` (together
// `bytes` long, not split on element boundaries), held by `owner` (received
// slices or a string): they stay valid as long as `owner` does.
struct PushGradPieceInput {
  uint64_t offset = 0;
  int dtype = 0;  // zeroshard.v1.DType value as received (may be unknown)
  size_t bytes = 0;
  std::vector<std::pair<const uint8_t*, size_t>> segments;
  std::shared_ptr<const void> owner;
};

struct ReceivedPushGrad {
  bool is_piece = false;
  PushGradPieceInput piece;  // when is_piece
  v1::PushGradMessage message;  // otherwise
};

// Decodes `buffer` into `out`; INVALID_ARGUMENT when it does not parse as a
// PushGradMessage.
absl::Status DecodePushGradMessage(grpc::ByteBuffer& buffer,
                                   ReceivedPushGrad* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_PUSH_GRAD_CODEC_H_
