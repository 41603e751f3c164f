#include "server/push_grad_decoding.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/slice_cursor.h"

namespace zeroshard {
namespace {

constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;


// The canonical piece encoding, data left in the slices; false when the
// message is anything else (protobuf then decides).
bool DecodeCanonicalPiece(std::vector<grpc::Slice>& slices, size_t total,
                          PushGradPieceInput* out) {
  SliceCursor cur(slices);
  uint64_t tag, len;
  if (!cur.ReadVarint(&tag) || tag != ((2 << 3) | kLengthDelimited) ||
      !cur.ReadVarint(&len) || len != total - cur.consumed()) {
    return false;
  }
  bool seen[4] = {false, false, false, false};
  std::vector<std::pair<const uint8_t*, size_t>> segments;
  while (!cur.AtEnd()) {
    if (!cur.ReadVarint(&tag)) return false;
    const uint64_t field = tag >> 3;
    const int wire = static_cast<int>(tag & 7);
    if (field < 1 || field > 3 || seen[field]) return false;
    seen[field] = true;
    uint64_t v;
    if (!cur.ReadVarint(&v)) return false;
    if (field == 1 && wire == kVarint) {
      out->offset = v;
    } else if (field == 2 && wire == kVarint &&
               v <= static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      out->dtype = static_cast<int>(v);
    } else if (field == 3 && wire == kLengthDelimited) {
      if (v > total || !cur.Take(v, &segments)) return false;
      out->bytes = v;
    } else {
      return false;
    }
  }
  out->segments = std::move(segments);
  if (out->bytes > 0) {
    out->owner = std::make_shared<std::vector<grpc::Slice>>(std::move(slices));
  }
  return true;
}

}  // namespace

absl::Status DecodePushGradMessage(grpc::ByteBuffer& buffer,
                                   ReceivedPushGrad* out) {
  out->is_piece = false;
  out->piece = PushGradPieceInput();
  out->message.Clear();
  std::vector<grpc::Slice> slices;
  if (buffer.Dump(&slices).ok() &&
      DecodeCanonicalPiece(slices, buffer.Length(), &out->piece)) {
    out->is_piece = true;
    return absl::OkStatus();
  }
  out->piece = PushGradPieceInput();
  grpc::ProtoBufferReader reader(&buffer);
  if (!out->message.ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        "PushGrad: a message does not parse as a PushGradMessage");
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
