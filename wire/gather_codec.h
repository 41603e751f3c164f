// GatherChunk, both directions, with one copy of the payload on each side:
//
// - The server (server/gather_reactor.cc) encodes a chunk with
//   EncodeGatherChunk: the protobuf wire header (offset, dtype, version and
//   the length prefix of `data`) followed by the payload, written straight
//   into a single slice by the caller's fill function.
// - The client (client/gather_stream.cc) reads it with DecodeGatherChunk,
//   which exposes the data as segments of the received slices, so the client
//   copies each byte once, into the destination.
//
//   grpc::ByteBuffer b = EncodeGatherChunk(offset, DType::kBf16, version,
//       n * 2, [&](uint8_t* dst) { store.Read(range, DType::kBf16, dst); });
//   GatherChunkView view;
//   RETURN_IF_ERROR(DecodeGatherChunk(b, &view));
//   view.CopyDataTo(dst);
//
// The encoding parses as a GatherChunk with any protobuf implementation, and
// the decoder accepts any serialization protobuf produces (tests/wire/).
#ifndef ZEROSHARD_WIRE_GATHER_CODEC_H_
#define ZEROSHARD_WIRE_GATHER_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/dtype.h"

namespace zeroshard {

// ---- Encoding (server) ------------------------------------------------------

// Bytes of the encoded header for these values (at most 34).
size_t GatherChunkHeaderSize(uint64_t offset, DType dtype, uint64_t version,
                             size_t payload_bytes);

// Writes the header to `out` (GatherChunkHeaderSize bytes); returns its size.
size_t EncodeGatherChunkHeader(uint64_t offset, DType dtype, uint64_t version,
                               size_t payload_bytes, uint8_t* out);

// One message in one slice; `fill` writes exactly payload_bytes bytes.
grpc::ByteBuffer EncodeGatherChunk(uint64_t offset, DType dtype,
                                   uint64_t version, size_t payload_bytes,
                                   absl::FunctionRef<void(uint8_t*)> fill);

// A chunk of a Gather into shared memory: offset, dtype, version and
// region_elems, no data.
grpc::ByteBuffer EncodeGatherRegionChunk(uint64_t offset, DType dtype,
                                         uint64_t version, uint64_t elems);

// ---- Decoding (client) ------------------------------------------------------

// A decoded GatherChunk whose data stays in the received slices.
struct GatherChunkView {
  uint64_t offset = 0;
  int dtype = 0;  // zeroshard.v1.DType value
  uint64_t version = 0;
  size_t data_bytes = 0;
  // Elements written into the caller's shared-memory region (field 5).
  uint64_t region_elems = 0;

  // Copies the data_bytes bytes of data to dst.
  void CopyDataTo(void* dst) const;

  std::vector<grpc::Slice> slices;  // keeps the segments alive
  std::vector<std::pair<const uint8_t*, size_t>> segments;
};

// Parses a serialized GatherChunk. Unknown fields are skipped; malformed
// input is DATA_LOSS.
absl::Status DecodeGatherChunk(grpc::ByteBuffer& buffer, GatherChunkView* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_GATHER_CODEC_H_
