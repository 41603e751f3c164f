// Hand-encodes a zeroshard.v1.GatherChunk into a grpc::ByteBuffer with one
// copy of the payload: the protobuf wire header (offset, dtype, version and
// the length prefix of `data`) followed by the payload, written straight
// into a single slice by the caller's fill function.
//
//   grpc::ByteBuffer b = EncodeGatherChunk(offset, DType::kBf16, version,
//       n * 2, [&](uint8_t* dst) { store.Read(range, DType::kBf16, dst); });
//
// The result parses as a GatherChunk with any protobuf implementation.
#ifndef ZEROSHARD_SERVER_GATHER_ENCODING_H_
#define ZEROSHARD_SERVER_GATHER_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "common/dtype.h"

namespace zeroshard {

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

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_GATHER_ENCODING_H_
