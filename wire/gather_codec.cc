#include "wire/gather_codec.h"

#include <grpc/slice.h>
#include <grpcpp/support/slice.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include "wire/slice_cursor.h"
#include "wire/varint.h"

namespace zeroshard {
namespace {

// GatherChunk's fields: 1 offset, 2 dtype, 3 version, 4 data.
constexpr uint8_t kOffsetTag = FieldTag(1, kVarint);
constexpr uint8_t kDtypeTag = FieldTag(2, kVarint);
constexpr uint8_t kVersionTag = FieldTag(3, kVarint);
constexpr uint8_t kDataTag = FieldTag(4, kLengthDelimited);
constexpr uint8_t kRegionElemsTag = FieldTag(5, kVarint);

}  // namespace

size_t GatherChunkHeaderSize(uint64_t offset, DType dtype, uint64_t version,
                             size_t payload_bytes) {
  return 4 + VarintSize(offset) + VarintSize(static_cast<uint64_t>(dtype)) +
         VarintSize(version) + VarintSize(payload_bytes);
}

size_t EncodeGatherChunkHeader(uint64_t offset, DType dtype, uint64_t version,
                               size_t payload_bytes, uint8_t* out) {
  uint8_t* p = out;
  *p++ = kOffsetTag;
  p = PutVarint(offset, p);
  *p++ = kDtypeTag;
  p = PutVarint(static_cast<uint64_t>(dtype), p);
  *p++ = kVersionTag;
  p = PutVarint(version, p);
  *p++ = kDataTag;
  p = PutVarint(payload_bytes, p);
  return static_cast<size_t>(p - out);
}

grpc::ByteBuffer EncodeGatherChunk(uint64_t offset, DType dtype,
                                   uint64_t version, size_t payload_bytes,
                                   absl::FunctionRef<void(uint8_t*)> fill) {
  const size_t header =
      GatherChunkHeaderSize(offset, dtype, version, payload_bytes);
  grpc_slice raw = grpc_slice_malloc(header + payload_bytes);
  uint8_t* p = GRPC_SLICE_START_PTR(raw);
  EncodeGatherChunkHeader(offset, dtype, version, payload_bytes, p);
  fill(p + header);
  grpc::Slice slice(raw, grpc::Slice::STEAL_REF);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer EncodeGatherRegionChunk(uint64_t offset, DType dtype,
                                         uint64_t version, uint64_t elems) {
  uint8_t raw[64];
  uint8_t* p = raw;
  *p++ = kOffsetTag;
  p = PutVarint(offset, p);
  *p++ = kDtypeTag;
  p = PutVarint(static_cast<uint64_t>(dtype), p);
  *p++ = kVersionTag;
  p = PutVarint(version, p);
  *p++ = kRegionElemsTag;
  p = PutVarint(elems, p);
  grpc::Slice slice(raw, static_cast<size_t>(p - raw));
  return grpc::ByteBuffer(&slice, 1);
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
      if (field == 5) out->region_elems = v;
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
