// The shared-memory regions a shard server has opened for its clients
// (OpenRegion / CloseRegion; docs/DESIGN.md, "Shared memory on one host").
//
// A region is a SharedMemory (common/shared_memory.h) named by a random
// 64-bit id. Gather writes into a region and PushGrad reads from one, each
// holding the region by shared_ptr for as long as it uses it, so a Close
// racing a call frees the memory only after the call. At most kMaxRegions
// are open, together at most the caller's byte limit, and OpenRegion beyond
// either limit is RESOURCE_EXHAUSTED (the client then goes on over gRPC). A
// client that dies without closing its region (a worker killed and
// restarted) leaves it until the next Open, which first frees every region
// whose client, as it recorded itself on attaching
// (SharedMemory::client_pid), no longer exists.
//
//   ASSIGN_OR_RETURN(SharedRegions::Opened r, regions.Open(bytes));
//   ASSIGN_OR_RETURN(std::shared_ptr<SharedMemory> m, regions.Find(r.id));
//   ASSIGN_OR_RETURN(uint8_t* p, SharedRegions::Span(*m, offset, n, "what"));
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_SHARED_REGIONS_H_
#define ZEROSHARD_SERVER_SHARED_REGIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/shared_memory.h"

namespace zeroshard {

class SharedRegions {
 public:
  static constexpr size_t kMaxRegions = 64;

  struct Opened {
    uint64_t id = 0;
    std::shared_ptr<SharedMemory> memory;
  };

  // A new region of `bytes` bytes; INVALID_ARGUMENT outside
  // (kDataOffset, max_bytes], RESOURCE_EXHAUSTED at kMaxRegions or when the
  // open regions' bytes would pass `max_total_bytes`.
  absl::StatusOr<Opened> Open(size_t bytes, size_t max_bytes,
                              size_t max_total_bytes);
  // Frees the regions whose recorded client has exited (kill(pid, 0) says
  // there is no such process); returns how many. Open calls it first.
  size_t FreeOrphans();
  // The open regions' bytes.
  size_t bytes() const;
  // NOT_FOUND for an id that is not open.
  absl::StatusOr<std::shared_ptr<SharedMemory>> Find(uint64_t id) const;
  // NOT_FOUND for an id that is not open.
  absl::Status Close(uint64_t id);
  size_t size() const;

  // The `bytes` bytes at `offset` of `memory`'s data area (offsets count
  // from byte 0 of the region, so they start at SharedMemory::kDataOffset);
  // INVALID_ARGUMENT naming `what` when they are not all inside it.
  static absl::StatusOr<uint8_t*> Span(const SharedMemory& memory,
                                       uint64_t offset, uint64_t bytes,
                                       absl::string_view what);

  // Region `id`'s span, with the region held for as long as the caller
  // keeps `memory`: Find, then Span, each error naming `what`.
  struct Resolved {
    std::shared_ptr<SharedMemory> memory;
    uint8_t* at = nullptr;
  };
  absl::StatusOr<Resolved> Resolve(uint64_t id, uint64_t offset,
                                   uint64_t bytes,
                                   absl::string_view what) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<SharedMemory>> regions_
      ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARED_REGIONS_H_
