// A shared-memory region with one shard server on this host: the client's
// half of OpenRegion (docs/DESIGN.md, "Shared memory on one host").
//
// The region holds two areas of the server's owned range in FP32 each:
// - the push area, where a gradient piece for flat offset o in dtype t is
//   written at (o - owned.begin) * sizeof(t) before its PushGradRegionPiece
//   is sent (client/server_push_stream.cc);
// - the gather area, into which the server writes a Gather's elements,
//   concatenated in request order, for the client to copy out
//   (client/gather_stream.cc). One Gather at a time uses it (gather_mu).
//
//   ASSIGN_OR_RETURN(auto region, ServerRegion::Open(channels, k, owned));
//   channels.SetRegion(k, std::move(region));
//
// Thread-safe.
#ifndef ZEROSHARD_CLIENT_SERVER_REGION_H_
#define ZEROSHARD_CLIENT_SERVER_REGION_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/layout.h"
#include "common/shared_memory.h"

namespace zeroshard {

class ShardChannels;

class ServerRegion {
 public:
  // Opens a region on server k, whose owned range is `owned`, and maps it.
  // FAILED_PRECONDITION when it cannot be mapped here (the server is on
  // another host, in another pid namespace or runs as another user): the
  // region is closed again on the server and the caller stays on gRPC.
  static absl::StatusOr<std::unique_ptr<ServerRegion>> Open(
      const ShardChannels& channels, int k, FlatRange owned);

  uint64_t id() const { return id_; }
  const FlatRange& owned() const { return owned_; }
  // Byte offsets in the region, as the RPCs name them.
  uint64_t push_offset(uint64_t flat_offset, size_t elem_size) const {
    return SharedMemory::kDataOffset + (flat_offset - owned_.begin) * elem_size;
  }
  uint64_t gather_offset() const {
    return SharedMemory::kDataOffset + owned_.size() * sizeof(float);
  }
  uint8_t* at(uint64_t offset) const { return memory_->data() + offset; }
  // Held by a Gather for its whole call.
  absl::Mutex& gather_mu() const { return gather_mu_; }

  // CloseRegion on the server (best effort: the server frees it at exit
  // anyway).
  void Close(const ShardChannels& channels, int k) const;

 private:
  ServerRegion(uint64_t id, std::unique_ptr<SharedMemory> memory,
               FlatRange owned)
      : id_(id), memory_(std::move(memory)), owned_(owned) {}

  const uint64_t id_;
  const std::unique_ptr<SharedMemory> memory_;
  const FlatRange owned_;
  mutable absl::Mutex gather_mu_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SERVER_REGION_H_
