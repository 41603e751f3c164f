#include "client/wire_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/slice_cursor.h"
#include "common/varint.h"

namespace zeroshard {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

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

void GatherChunkView::CopyDataTo(void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  for (const auto& [p, n] : segments) {
    std::memcpy(out, p, n);
    out += n;
  }
}

absl::Status DecodeGatherChunk(grpc::ByteBuffer& buffer,
                               GatherChunkView* out) {
  *out = GatherChunkView();
  if (!buffer.Dump(&out->slices).ok()) {
    return absl::DataLossError("GatherChunk: cannot read the message");
  }
  SliceCursor cur(out->slices);
  auto malformed = [](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("malformed GatherChunk: ", what));
  };
  while (!cur.AtEnd()) {
    uint64_t tag;
    if (!cur.ReadVarint(&tag)) return malformed("truncated tag");
    const int field = static_cast<int>(tag >> 3);
    const int wire = static_cast<int>(tag & 7);
    if (wire == kVarint) {
      uint64_t v;
      if (!cur.ReadVarint(&v)) return malformed("truncated varint");
      if (field == 1) out->offset = v;
      if (field == 2) out->dtype = static_cast<int>(v);
      if (field == 3) out->version = v;
    } else if (wire == kLengthDelimited) {
      uint64_t len;
      if (!cur.ReadVarint(&len)) return malformed("truncated length");
      if (field == 4) {
        // proto3: the last occurrence of a bytes field wins.
        out->segments.clear();
        out->data_bytes = len;
        if (!cur.Take(len, &out->segments)) return malformed("truncated data");
      } else if (!cur.Take(len, nullptr)) {
        return malformed("truncated field");
      }
    } else if (wire == kFixed64) {
      if (!cur.Take(8, nullptr)) return malformed("truncated fixed64");
    } else if (wire == kFixed32) {
      if (!cur.Take(4, nullptr)) return malformed("truncated fixed32");
    } else {
      return malformed(absl::StrCat("unsupported wire type ", wire));
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
