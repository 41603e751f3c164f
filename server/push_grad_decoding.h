// Reads one received PushGradMessage from its grpc::ByteBuffer without
// copying a piece's gradient bytes out of the received slices.
//
// The client (client/wire_codec.cc) encodes a piece as exactly
// PushGradMessage{piece{offset, dtype, data}}: for that canonical form the
// decoder records where the data lies in the slices (a 1 MiB piece usually
// spans several) and keeps them alive; nothing is copied. Any other message
// (header, commit, fields repeated, unknown fields, a malformed encoding) is
// handed to protobuf's own parser, so the accepted wire format and its
// semantics are exactly those of shard.proto.
//
//   ReceivedPushGrad msg;
//   RETURN_IF_ERROR(DecodePushGradMessage(buffer, &msg));
//   if (msg.is_piece) { use msg.piece } else { use msg.message }
#ifndef ZEROSHARD_SERVER_PUSH_GRAD_DECODING_H_
#define ZEROSHARD_SERVER_PUSH_GRAD_DECODING_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

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

#endif  // ZEROSHARD_SERVER_PUSH_GRAD_DECODING_H_
