// UnitCache: a worker's parameters — its own partition of every unit (1/N of
// the model, fetched from the shard servers once per step) and the full
// units all-gathered from the other workers while they are in use.
//
// ZeRO-3 (resident = false): a unit is all-gathered when first needed (or
// prefetched one step ahead on the CommQueue while the previous unit
// computes) and freed on Release, so at most a couple of full units live at
// a time. ZeRO-1/2 (resident = true): GatherAll() all-gathers every unit once
// per step and they stay until the next step; Release is a no-op.
//
//   UnitCache cache(&layout, rank, DType::kBf16, /*resident=*/false, group,
//                   &queue);
//   ... fetch into cache.partition() ...
//   cache.Prefetch(1);
//   ASSIGN_OR_RETURN(model::UnitParams p, cache.Acquire(0));
//   ... compute with p ...
//   cache.Release(0);
//
// A group of one worker owns the whole model: its partition part of a unit
// is the full (padded) unit, so Acquire hands out the partition itself, with
// no buffer, copy or queue task.
//
// With a ModelMemory (the CUDA model's device, model/model_memory.h)
// the full units and a copy of the partition live in model memory: after
// UploadPartition() each unit's part of the fetched partition is copied
// there on the queue when the unit is first gathered (so the next unit's
// copy overlaps this one's compute), each gather runs from it into a
// model-memory buffer (a group of device buffers, then Synchronize), and
// Release takes a fence so that a buffer the model may still read is not
// gathered into again before that work finished.
//
// Not thread-safe: one compute thread calls it; gathers run on the queue.
#ifndef ZEROSHARD_WORKER_ENGINE_UNIT_CACHE_H_
#define ZEROSHARD_WORKER_ENGINE_UNIT_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "common/page_aligned.h"
#include "comm/collectives.h"
#include "worker/engine/comm_queue.h"
#include "model/model_memory.h"
#include "model/unit_weights.h"

namespace zeroshard {

class UnitCache {
 public:
  // `space`: null for host memory; otherwise it must outlive the cache.
  UnitCache(const FlatLayout* layout, int rank, DType dtype, bool resident,
            WorkerGroup* group, CommQueue* queue,
            model::ModelMemory* space = nullptr);
  ~UnitCache();
  UnitCache(const UnitCache&) = delete;
  UnitCache& operator=(const UnitCache&) = delete;

  DType dtype() const { return dtype_; }
  // The partition: this worker's part of every unit, concatenated in unit
  // order (layout.WorkerRanges(rank)), in dtype().
  uint8_t* partition() { return partition_.data(); }
  size_t partition_bytes() const { return partition_.size(); }
  // A new version of the partition was fetched: with a ModelMemory, each
  // unit's part is copied there before its next gather (no-op without
  // one). Call with no gather in flight (after ReleaseAll).
  absl::Status UploadPartition();

  // Starts the all-gather of unit u on the queue unless it is present or in
  // flight.
  void Prefetch(int unit);
  // Returns unit u's full parameters, gathering them (and waiting) if needed.
  absl::StatusOr<model::UnitParams> Acquire(int unit);
  // Frees unit u's full buffer (ZeRO-3); a no-op when resident.
  // With a ModelMemory, a fence after the model's use of the unit is taken
  // here.
  void Release(int unit);
  // Frees every full buffer (waits for gathers in flight first).
  absl::Status ReleaseAll();
  // All-gathers every unit (resident mode, once per step after the fetch).
  absl::Status GatherAll();

  // Bytes of full unit buffers alive now (in use; released buffers kept for
  // reuse count in the peak), and the peak since ResetPeak().
  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t peak_bytes() const { return peak_bytes_; }
  void ResetPeak() { peak_bytes_ = live_bytes_ + spare_bytes_; }

 private:
  // A full unit's memory: host bytes, or an allocation of space_.
  struct Buffer {
    uint8_t* data = nullptr;
    size_t size = 0;
    std::vector<uint8_t> host;
    // Model work that may still read the buffer (model memory).
    std::shared_ptr<model::ModelFence> fence;
  };
  struct Slot {
    Buffer buffer;         // padded unit, dtype_
    CommTicket ticket;     // the gather in flight, if any
    bool present = false;  // gathered (or in flight)
  };
  void StartGather(int unit);
  absl::Status Allocate(size_t bytes, Buffer* b);
  void Free(Buffer* b);
  // Model memory: `b`, which the model may still read, gets a fence after
  // the model's work so far (waited on before the buffer is written again
  // or freed). Without one it is dropped, never returned to the pool: work
  // may still read it, and a device that cannot record an event is failing
  // anyway.
  void Retire(Buffer* b);
  // This worker's part of unit u where gathers read it (model memory when
  // uploaded).
  const uint8_t* Part(int unit) const;
  // Copies unit u's part of the partition to model memory, after the fence
  // on the model's work with the previous version. Queue thread.
  absl::Status UploadPart(int unit);
  // One worker: units are read straight from the partition.
  bool direct() const { return group_->size() == 1; }

  const FlatLayout* layout_;
  const int rank_;
  const DType dtype_;
  const bool resident_;
  WorkerGroup* group_;
  CommQueue* queue_;
  model::ModelMemory* space_;
  PageAlignedVector<uint8_t> partition_;  // page-locked with model memory
  uint8_t* partition_model_ = nullptr;  // its copy in model memory
  // Per unit: its part of this version is uploaded (or queued).
  std::vector<char> uploaded_;
  // The model's work with the previous version (waited on before an upload
  // overwrites what it reads).
  std::shared_ptr<model::ModelFence> upload_fence_;
  bool partition_pinned_ = false;
  std::vector<size_t> part_offset_;
  std::vector<Slot> slots_;
  // Released buffers kept for reuse (at most kMaxSpares).
  static constexpr size_t kMaxSpares = 2;
  std::vector<Buffer> spare_;
  uint64_t spare_bytes_ = 0;
  uint64_t live_bytes_ = 0;
  uint64_t peak_bytes_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_UNIT_CACHE_H_
