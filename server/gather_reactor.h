// The server-streaming Gather call, on the raw callback API: each reply is a
// GatherChunk hand-encoded into one slice (wire/gather_codec.h), so each
// payload byte is copied once, from the store into the message.
//
// The request is validated first (ranges inside the owned range and
// pairwise disjoint, dtype FP32 or BF16). Then, range by range in request
// order, each server chunk is sent once its version is >= min_version, in
// messages of at most max_message_bytes (default and cap 1 MiB) that never
// span two chunks. A Gather into a shared-memory region writes each chunk's
// elements there instead and sends one small message per server chunk.
// Waiting registers a callback with the StepTracker; no thread blocks. A
// call cancelled or past its deadline while waiting is finished at once and
// its waiter removed.
//
// Lifetime: the reactor deletes itself when gRPC is done with it and no
// waiter callback can still reach it (reference counted).
#ifndef ZEROSHARD_SERVER_GATHER_REACTOR_H_
#define ZEROSHARD_SERVER_GATHER_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/status_reactor.h"
#include "server/rpc_counters.h"
#include "server/model_shard.h"
#include "server/shared_regions.h"

namespace zeroshard {

// Largest payload of one GatherChunk.
inline constexpr uint32_t kMaxGatherMessageBytes = 1 << 20;

// A validated Gather request.
struct GatherPlan {
  std::vector<FlatRange> ranges;  // in request order
  DType dtype = DType::kBf16;
  int64_t min_version = -1;
  uint64_t elems_per_message = 0;
  // A Gather into shared memory: the region and where in it the ranges'
  // elements go (checked to fit); the replies carry no data.
  std::shared_ptr<SharedMemory> region;
  uint8_t* region_at = nullptr;
};

// `regions` (null: none served) resolves a request's region.
absl::StatusOr<GatherPlan> PlanGather(const ModelShard& state,
                                      const v1::GatherRequest& request,
                                      const SharedRegions* regions = nullptr);

class GatherReactor
    : public StatusReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  // Starts streaming at once; `state` must be non-null.
  GatherReactor(std::shared_ptr<ModelShard> state, GatherPlan plan,
                RpcCounters* counters);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Sends the next message, registers a wait, or finishes.
  void Next();
  void OnChunkReady();
  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  // Constant after construction.
  const std::shared_ptr<ModelShard> state_;
  const GatherPlan plan_;
  RpcCounters* const counters_;
  std::atomic<int> refs_{1};  // gRPC's reference, dropped in OnDone

  absl::Mutex mu_;
  size_t range_index_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pos_ ABSL_GUARDED_BY(mu_) = 0;  // next offset in the range
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // bytes into the region
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t waiter_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The message being written; replaced only when no write is in flight.
  grpc::ByteBuffer buffer_;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  bool recorded_ ABSL_GUARDED_BY(mu_) = false;  // result_ already counted
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_GATHER_REACTOR_H_
