// A shared-memory region with one shard server on this host: the client's
// half of OpenRegion (docs/DESIGN.md, "Shared memory on one host").
//
// The region holds two areas, sized for what the client moves at a time:
// - the push area: a PushGrad stream writes its pieces there one after the
//   other and names each in a PushGradRegionPiece
//   (client/server_push_stream.cc);
// - the gather area, into which the server writes a Gather's elements,
//   concatenated in request order, for the client to copy out
//   (client/gather_stream.cc).
// One stream and one Gather at a time use each area (TakePush /
// TakeGather): another call made meanwhile, or one that does not fit, goes
// over gRPC as before.
//
//   ASSIGN_OR_RETURN(auto region, ServerRegion::Open(channels, k, push_bytes,
//                                                    gather_bytes));
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
#include "common/shared_memory.h"

namespace zeroshard {

class ShardChannels;

class ServerRegion {
 public:
  // Opens a region on server k with areas of `push_bytes` and
  // `gather_bytes` (each rounded up to 64 bytes), and maps it.
  // FAILED_PRECONDITION when it cannot be mapped here (the server is on
  // another host, in another pid namespace or runs as another user): the
  // region is closed again on the server and the caller stays on gRPC.
  static absl::StatusOr<std::unique_ptr<ServerRegion>> Open(
      const ShardChannels& channels, int k, uint64_t push_bytes,
      uint64_t gather_bytes);

  uint64_t id() const { return id_; }
  // The areas, as byte offsets in the region (the RPCs name these).
  uint64_t push_offset() const { return SharedMemory::kDataOffset; }
  uint64_t push_bytes() const { return push_bytes_; }
  uint64_t gather_offset() const { return push_offset() + push_bytes_; }
  uint64_t gather_bytes() const { return gather_bytes_; }
  uint8_t* at(uint64_t offset) const { return memory_->data() + offset; }
  // `region`'s push area, or its gather area for `bytes` bytes, for one
  // call: held (and the region kept) until the returned pointer is
  // released; null when there is no region, the call does not fit, or
  // another call holds the area.
  static std::shared_ptr<const ServerRegion> TakePush(
      std::shared_ptr<const ServerRegion> region);
  static std::shared_ptr<const ServerRegion> TakeGather(
      std::shared_ptr<const ServerRegion> region, uint64_t bytes);

  // CloseRegion on the server (best effort: the server frees it anyway at
  // its exit, or at its next OpenRegion once this process has exited).
  void Close(const ShardChannels& channels, int k) const {
    CloseOn(channels, k, id_);
  }
  static void CloseOn(const ShardChannels& channels, int k, uint64_t id);

 private:
  ServerRegion(uint64_t id, std::unique_ptr<SharedMemory> memory,
               uint64_t push_bytes, uint64_t gather_bytes)
      : id_(id),
        memory_(std::move(memory)),
        push_bytes_(push_bytes),
        gather_bytes_(gather_bytes) {}

  const uint64_t id_;
  const std::unique_ptr<SharedMemory> memory_;
  const uint64_t push_bytes_;
  const uint64_t gather_bytes_;
  static std::shared_ptr<const ServerRegion> Take(
      std::shared_ptr<const ServerRegion> region, bool push);
  absl::Mutex& area_mu(bool push) const { return push ? push_mu_ : gather_mu_; }

  mutable absl::Mutex push_mu_;
  mutable absl::Mutex gather_mu_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SERVER_REGION_H_
