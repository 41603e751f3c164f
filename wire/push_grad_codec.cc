#include "wire/push_grad_codec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "wire/proto_buffer.h"
#include "wire/slice_cursor.h"
#include "wire/varint.h"

namespace zeroshard {
namespace {


struct ReleaseContext {
  std::shared_ptr<InFlightBytes> in_flight;
  size_t bytes;
};

void ReleaseData(void* user_data) {
  auto* ctx = static_cast<ReleaseContext*>(user_data);
  ctx->in_flight->Release(ctx->bytes);
  delete ctx;
}

void NoRelease(void*) {}

// The longest length-delimited field protobuf parses (INT_MAX less its
// 16 slop bytes).
constexpr uint64_t kMaxProtobufLength =
    static_cast<uint64_t>(std::numeric_limits<int>::max()) - 16;

// The canonical piece encoding, data left in the slices; false when the
// message is anything else (protobuf then decides).
bool DecodeCanonicalPiece(std::vector<grpc::Slice>& slices, size_t total,
                          PushGradPieceInput* out) {
  SliceCursor cur(slices);
  uint64_t tag, len;
  // Tags of one byte (fields 1-3), lengths as protobuf reads them: at most
  // 5 bytes and below its 2 GiB limit. Anything else is not the canonical
  // encoding, and protobuf decides (it refuses a 10-byte length, say, that
  // a plain varint read would take for 0).
  if (!cur.ReadVarint(&tag, 1) || tag != ((2 << 3) | kLengthDelimited) ||
      !cur.ReadVarint(&len, 5) || len > kMaxProtobufLength ||
      len != total - cur.consumed()) {
    return false;
  }
  bool seen[4] = {false, false, false, false};
  std::vector<std::pair<const uint8_t*, size_t>> segments;
  while (!cur.AtEnd()) {
    if (!cur.ReadVarint(&tag, 1)) return false;
    const uint64_t field = tag >> 3;
    const int wire = static_cast<int>(tag & 7);
    if (field < 1 || field > 3 || seen[field]) return false;
    seen[field] = true;
    uint64_t v;
    if (!cur.ReadVarint(&v, wire == kLengthDelimited ? 5 : 10)) return false;
    if (field == 1 && wire == kVarint) {
      out->offset = v;
    } else if (field == 2 && wire == kVarint &&
               v <= static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      out->dtype = static_cast<int>(v);
    } else if (field == 3 && wire == kLengthDelimited) {
      if (v > total || v > kMaxProtobufLength || !cur.Take(v, &segments)) {
        return false;
      }
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

void InFlightBytes::Add(size_t n) {
  absl::MutexLock lock(&mu_);
  bytes_ += n;
}

void InFlightBytes::Release(size_t n) {
  absl::MutexLock lock(&mu_);
  bytes_ -= std::min(n, bytes_);
}

size_t InFlightBytes::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

bool InFlightBytes::WaitForRoom(size_t n, size_t cap, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto room = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return bytes_ == 0 || bytes_ + n <= cap;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&room), deadline);
}

grpc::ByteBuffer EncodePushPiece(
    uint64_t offset, DType dtype, const void* data, size_t bytes,
    const std::shared_ptr<InFlightBytes>& in_flight) {
  // PushGradPiece: 1:offset varint, 2:dtype varint, 3:data bytes.
  const uint64_t dtype_value = static_cast<uint64_t>(dtype);
  const size_t inner = 1 + VarintSize(offset) + 1 + VarintSize(dtype_value) +
                       1 + VarintSize(bytes) + bytes;
  uint8_t prefix[64];
  size_t n = 0;
  prefix[n++] = (2 << 3) | kLengthDelimited;  // PushGradMessage.piece
  n = PutVarint(inner, prefix + n) - prefix;
  prefix[n++] = (1 << 3) | kVarint;
  n = PutVarint(offset, prefix + n) - prefix;
  prefix[n++] = (2 << 3) | kVarint;
  n = PutVarint(dtype_value, prefix + n) - prefix;
  prefix[n++] = (3 << 3) | kLengthDelimited;
  n = PutVarint(bytes, prefix + n) - prefix;

  grpc::Slice slices[2] = {grpc::Slice(prefix, n), grpc::Slice()};
  void* ptr = const_cast<void*>(data);
  if (in_flight != nullptr) {
    in_flight->Add(bytes);
    slices[1] = grpc::Slice(ptr, bytes, &ReleaseData,
                            new ReleaseContext{in_flight, bytes});
  } else {
    slices[1] = grpc::Slice(ptr, bytes, &NoRelease, nullptr);
  }
  return grpc::ByteBuffer(slices, bytes > 0 ? 2 : 1);
}

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
  if (!ParseProtoFromByteBuffer(buffer, &out->message)) {
    return absl::InvalidArgumentError(
        "PushGrad: a message does not parse as a PushGradMessage");
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
