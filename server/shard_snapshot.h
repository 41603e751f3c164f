// A copy of one shard at a step boundary, taken while training goes on
// (docs/DESIGN.md, "Checkpoints").
//
// Armed at version s (ModelShard::ArmSnapshot), a snapshot receives each
// chunk's master and state slots exactly once: from the thread about
// to apply the chunk's first piece of step s (StepTracker marks those claims
// with capture = true), or at arming for chunks already at s and untouched.
// The copy is taken under the chunk's lock, so no update of step s is in it
// and every update of step s-1 is. When the last chunk is in, the snapshot
// is written (when it has a directory) on its own thread to
//   <directory>/step-<20 digits>/shard-<k>-of-<S>.bin
// and then reports done to its waiters.
//
// A snapshot with a directory on a host store streams (`stream_from`): it
// keeps no copy of the shard. Its chunks are only marked as they reach the
// step; once all are, the writer reads each from the store itself, in the
// file's order, under the chunk's lock, into the file's one buffer
// (ShardFileStream). An update that comes to a chunk the writer has not
// read whole first copies that chunk aside (Capture with before_update),
// and the writer takes it from there. The captures stay armed until the
// writer has read every chunk (OnChunksRead).
//
//   auto snap = std::make_shared<ShardSnapshot>(spec);
//   if (snap->Capture(store, c, adam_t)) ... last chunk: Finish(...)
//   snap->AddWaiter([](const absl::StatusOr<SnapshotResult>& r) {...});
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_SHARD_SNAPSHOT_H_
#define ZEROSHARD_SERVER_SHARD_SNAPSHOT_H_

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/checkpoint.pb.h"
#include "server/shard_checkpoint.h"
#include "server/shard_store.h"

namespace zeroshard {

// What a finished snapshot wrote.
struct SnapshotResult {
  std::string path;          // "" for an in-memory snapshot
  uint64_t bytes = 0;
  uint64_t checksum = 0;     // XXH3-64 of the file
  double copy_seconds = 0;   // summed over chunks: the updates' pause
  double write_seconds = 0;
};

// The copied arrays of `n` elements: master, then each state slot the
// header names (ShardCheckpointSlots), each slot an image of
// SlotBytes(format, n) bytes (ShardCheckpointFormats).
// (Transparent huge pages were tried for them: with this kernel's
// defrag=madvise, direct compaction made a checkpoint cost 2-3x more.)
struct SnapshotArrays {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  uint64_t n = 0;
  std::vector<std::unique_ptr<float[], Free>> a;
};

class ShardSnapshot {
 public:
  // `header` names the shard (server, owned, chunk size, model, optimizer);
  // its step, versions and Adam steps are filled in here. `arrays` (may be
  // null) are used when they have the owned range's size.
  ShardSnapshot(uint64_t step, std::string directory,
                v1::ShardCheckpointHeader header, size_t num_chunks,
                std::unique_ptr<SnapshotArrays> arrays = nullptr,
                const ShardStore* stream_from = nullptr);
  ~ShardSnapshot();
  ShardSnapshot(const ShardSnapshot&) = delete;
  ShardSnapshot& operator=(const ShardSnapshot&) = delete;

  // False when the copy's memory could not be allocated (the snapshot is
  // then unusable; ArmSnapshot reports RESOURCE_EXHAUSTED).
  bool allocated() const { return streaming() || arrays_ != nullptr; }
  // Whether it streams from the store (no copy of its own).
  bool streaming() const { return stream_ != nullptr; }
  uint64_t step() const { return step_; }
  const std::string& directory() const { return directory_; }
  // The shard file's path under directory().
  std::string FilePath() const;

  // Copies chunk c from `store` unless it was copied already; `adam_t` is
  // the chunk's Adam step count at version step(). Returns true when this
  // call copied the last missing chunk (the caller then calls Finish).
  // Streaming, the chunk is only marked, and copied aside when
  // `before_update` (an update of it follows) and the writer has not read
  // it whole.
  bool Capture(const ShardStore& store, size_t c, uint64_t adam_t,
               bool before_update = true);
  // Streaming: `done` runs once, on the writer's thread, when the writer
  // no longer reads the store (every chunk read, or the write failed):
  // updates need no capture from then on. Set before Finish.
  void OnChunksRead(std::function<void()> done) { chunks_read_ = std::move(done); }
  // Stops the background and writer threads and waits for them (the store
  // is about to go): an unfinished write ends CANCELLED.
  void Abandon();

  // After the last Capture: writes the file on a thread of its own (or, in
  // memory, finishes at once) and then wakes the waiters.
  void Finish();

  // Calls `done` once, when the snapshot is written (or failed), on the
  // writer's thread; at once on this thread when it already is. Returns an
  // id for CancelWaiter (0 when called at once).
  uint64_t AddWaiter(
      std::function<void(const absl::StatusOr<SnapshotResult>&)> done);
  // False when the waiter has been called (or is being called).
  bool CancelWaiter(uint64_t id);

  // The result once done; nullopt before.
  std::optional<absl::StatusOr<SnapshotResult>> result() const;

  // The copied arrays (valid once every chunk is in): 0 master, 1 + k slot
  // k's image of the owned range (an 8-bit slot: codes, then scales). A
  // snapshot with a directory frees them once its file is written (the
  // server's memory goes back to its state alone); null then.
  const float* array(size_t which) const {
    return arrays_ != nullptr && which < arrays_->a.size()
               ? arrays_->a[which].get()
               : nullptr;
  }
  // Array `which`'s values over `range` (inside the owned range) into out:
  // an 8-bit slot's dequantized. The arrays must still be held.
  void Values(size_t which, FlatRange range, float* out) const;

  // Runs `work` on a thread of its own, joined by the destructor; `work`
  // should return early once stopping() is true.
  void RunInBackground(std::function<void()> work);
  bool stopping() const { return stopping_.load(); }
  const v1::ShardCheckpointHeader& header() const { return header_; }

 private:
  void Write();
  // The streaming write; returns the file's checksum.
  absl::StatusOr<uint64_t> StreamWrite(const std::string& path);
  // Streaming: the chunk's pieces in file order (master, then each slot:
  // its values, or its codes and then its scales) and their bytes for a
  // chunk of n elements.
  struct Piece {
    size_t array;  // 0 master, 1 + k slot k
    bool scales;   // an 8-bit slot's absmax
  };
  uint64_t PieceBytes(const Piece& p, uint64_t n) const;
  static const char* LivePiece(const Piece& p, const ShardStore::ChunkArrays& a);
  // The writer is done with the store: chunks_read_, once; copies freed.
  void ReleaseChunks();
  void Complete(absl::StatusOr<SnapshotResult> result);

  const uint64_t step_;
  const std::string directory_;
  const size_t num_chunks_;
  v1::ShardCheckpointHeader header_;  // chunk lists filled by Finish
  std::vector<uint64_t> adam_t_;      // per chunk, written by its Capture
  // Per chunk, set under the chunk's store lock.
  std::unique_ptr<std::atomic<bool>[]> copied_;
  std::atomic<size_t> remaining_;
  std::unique_ptr<SnapshotArrays> arrays_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<std::thread> background_;
  std::atomic<int64_t> copy_nanos_{0};
  // Streaming only (guarded by each chunk's store lock, but for the
  // atomics' fast paths).
  const ShardStore* const stream_;
  std::vector<SlotFormat> formats_;  // the header's slot formats
  std::vector<Piece> pieces_;
  std::vector<std::unique_ptr<char[]>> aside_;  // chunk copies, pieces in order
  std::unique_ptr<uint32_t[]> pieces_read_;     // by the writer, per chunk
  std::unique_ptr<std::atomic<bool>[]> safe_;   // read whole, or set aside
  std::atomic<bool> reading_done_{false};
  std::function<void()> chunks_read_;

  mutable absl::Mutex mu_;
  std::optional<absl::StatusOr<SnapshotResult>> result_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t,
                      std::function<void(const absl::StatusOr<SnapshotResult>&)>>
      waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::unique_ptr<std::thread> writer_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SNAPSHOT_H_
