// Hand-rolled protobuf encoding of the two bulk messages, so that gradient
// and parameter bytes are not copied into and out of std::string fields:
//
// - EncodePushPiece builds a PushGradMessage{piece} as a grpc::ByteBuffer of
//   two slices: a small encoded prefix and the caller's data, referenced, not
//   copied. The transport writes it straight from the caller's buffer.
// - DecodeGatherChunk reads a GatherChunk from a received ByteBuffer and
//   exposes its data as segments of the received slices, so the client copies
//   each byte once, into the destination.
//
// Both produce and accept exactly the wire format of shard.proto (tests check
// them against protobuf's own serializer and parser).
//
//   auto release = std::make_shared<InFlightBytes>();
//   grpc::ByteBuffer msg = EncodePushPiece(offset, DType::kBf16, ptr, bytes,
//                                          release);
//   // ... release->bytes() drops by `bytes` once gRPC lets go of the data.
#ifndef ZEROSHARD_CLIENT_WIRE_CODEC_H_
#define ZEROSHARD_CLIENT_WIRE_CODEC_H_

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

namespace zeroshard {

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

// A decoded GatherChunk whose data stays in the received slices.
struct GatherChunkView {
  uint64_t offset = 0;
  int dtype = 0;  // zeroshard.v1.DType value
  uint64_t version = 0;
  size_t data_bytes = 0;

  // Copies the data_bytes bytes of data to dst.
  void CopyDataTo(void* dst) const;

  std::vector<grpc::Slice> slices;  // keeps the segments alive
  std::vector<std::pair<const uint8_t*, size_t>> segments;
};

// Parses a serialized GatherChunk. Unknown fields are skipped; malformed
// input is DATA_LOSS.
absl::Status DecodeGatherChunk(grpc::ByteBuffer& buffer, GatherChunkView* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_WIRE_CODEC_H_
