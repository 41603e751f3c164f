#include "server/gather_encoding.h"

#include <grpc/slice.h>
#include <grpcpp/support/slice.h>

#include "common/varint.h"

namespace zeroshard {
namespace {

// Field tags: (number << 3) | wire type; 0 = varint, 2 = length-delimited.
constexpr uint8_t kOffsetTag = (1 << 3) | 0;
constexpr uint8_t kDtypeTag = (2 << 3) | 0;
constexpr uint8_t kVersionTag = (3 << 3) | 0;
constexpr uint8_t kDataTag = (4 << 3) | 2;

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

}  // namespace zeroshard
