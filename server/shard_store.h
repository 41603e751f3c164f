// The state of one shard server: FP32 master weights, the update rule's
// state slots (optim/update_rule.h; AdamW: exp_avg, exp_avg_sq) and a BF16
// mirror of the weights, for the contiguous flat range the server owns
// (FlatLayout::ServerRange in common/layout.h).
//
// The owned range is split into chunks of chunk_elems elements (the last one
// may be shorter). Each chunk has its own lock: an update of a chunk and a
// read of it never interleave, and updates of different chunks run in
// parallel. Versions and step bookkeeping live in StepTracker; this class
// only holds and moves bytes.
//
//   ASSIGN_OR_RETURN(auto store, ShardStore::Create(owned, 262144, kHost,
//                                                   UpdateRuleFor(kAdamW)));
//   store->FillSeeded(layout, seed, 0.02);
//   ShardStore::ChunkUpdate u{rule.MakeStep(cfg, 1, 1.0f, wd, 1.0), GradView::Fp32(g),
//                             store->ChunkRange(0)};
//   store->ApplyUpdatesInChunk(0, {&u, 1}, /*pool=*/nullptr);
//   store->Read(store->ChunkRange(0), DType::kBf16, out);
//
// Contracts: every range passed in must lie inside owned() (and, where noted,
// inside one chunk); callers validate first. All methods are thread-safe.
// Placements (placement.h): host and pinned state is read and written in
// place; device state (--placement=device) only through device_transfer.h,
// so every method that touches the arrays returns a Status (always OK on the
// host placements).
#ifndef ZEROSHARD_SERVER_SHARD_STORE_H_
#define ZEROSHARD_SERVER_SHARD_STORE_H_

#include <array>
#include <atomic>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "absl/types/span.h"
#include "optim/optimizer_pool.h"
#include "optim/quant8.h"
#include "optim/update_rule.h"
#include "server/placement.h"

namespace zeroshard {

// L2 norms over the owned range: of master, and of each slot (the rule's
// order).
struct StateNorms {
  double master = 0;
  std::vector<double> slots;
};

class ShardStore {
 public:
  // Allocates master, mirror and `rule`'s slots for `owned` in `placement`.
  // chunk_elems must be a positive multiple of 64, and of kQ8SlotBlock
  // under a rule with 8-bit slots (which the device placement refuses); at
  // most kMaxStateSlots slots. The contents are zero-filled only by a
  // Fill*. `rule` outlives the store.
  //
  // 8-bit slots (docs/DESIGN.md, "8-bit state") keep one code byte an
  // element and one FP32 scale per block of kQ8SlotBlock elements counted
  // from owned().begin, so no block straddles two chunks. A block's scale
  // follows all of its elements: an update must cover whole blocks
  // (CheckWholeBlocks), and applies each block's parts at once.
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(
      FlatRange owned, uint64_t chunk_elems, Placement placement,
      const UpdateRule& rule);

  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  FlatRange owned() const { return owned_; }
  Placement placement() const { return placement_; }
  const UpdateRule& rule() const { return *rule_; }
  size_t num_slots() const { return num_slots_; }
  uint64_t chunk_elems() const { return chunk_elems_; }
  size_t num_chunks() const { return num_chunks_; }
  // The global flat range of chunk c (< num_chunks()).
  FlatRange ChunkRange(size_t c) const;
  // The chunk holding global offset `offset` (inside owned()).
  size_t ChunkOf(uint64_t offset) const;

  // Initial state: master from FillInitialValues(layout, seed, std) or
  // zeros, every slot 0, mirror = BF16(master). Touches every page first.
  absl::Status FillSeeded(const FlatLayout& layout, uint64_t seed, double std);
  absl::Status FillZeros();

  // Several updates inside chunk c, under one hold of its lock, spread over
  // `pool`'s threads (the caller's only when pool is null).
  struct ChunkUpdate {
    AdamStep step;
    GradView grad;
    FlatRange range;  // inside chunk c
  };
  // Under an 8-bit rule the updates of a chunk must cover whole blocks;
  // a failed update (8-bit state that would not be finite) is the store's
  // fault(), as a device error is.
  absl::Status ApplyUpdatesInChunk(size_t c,
                                   absl::Span<const ChunkUpdate> updates,
                                   OptimizerPool* pool);
  // OK unless the rule has 8-bit slots and `ranges` (disjoint, any order)
  // leave part of a block they touch uncovered: FAILED_PRECONDITION naming
  // the block. Callers check a step's gradient with it before claiming.
  absl::Status CheckWholeBlocks(absl::Span<const FlatRange> ranges) const;

  // An update that needs a whole tensor at once (a tensor rule): copies
  // `range`'s master and slots (inside owned(), any chunks) chunk by chunk,
  // each under its chunk's lock, calls `f` on the copies (mirror null),
  // and when f succeeds writes master, slots and the mirror back chunk by
  // chunk the same way: one lock held at a time, every chunk's change
  // whole, as an element-wise update's. The caller's claim on the chunks
  // keeps every other update away in between. FAILED_PRECONDITION on the
  // device placement (tensor rules run on host state only; Init refuses
  // them there); otherwise f's status, with nothing written if it failed:
  // then the failure is the store's fault() (the step's claim stands, so
  // the tensor must not pass for updated; the server reports NOT_SERVING).
  absl::Status UpdateWholeRange(
      FlatRange range, absl::FunctionRef<absl::Status(const StateSlice&)> f);

  // Copies `range` (inside one chunk) as FP32 (master) or BF16 (mirror) to
  // `out`, which holds range.size() * DTypeSize(dtype) bytes.
  absl::Status Read(FlatRange range, DType dtype, void* out) const;

  // Overwrites master and mirror for `range` (inside owned(), any chunks)
  // from FP32 or BF16 `data`; the slots are unchanged.
  absl::Status WriteWeights(FlatRange range, DType dtype, const void* data);
  // Overwrites FP32 state slot `slot` (< the rule's slot count) for `range`
  // (inside owned(), any chunks) from range.size() finite FP32 values;
  // master, mirror and the other slots stay. INVALID_ARGUMENT for an 8-bit
  // slot (its blocks' scales would change for values outside the range).
  absl::Status WriteSlot(FlatRange range, size_t slot, const float* data);

  // Overwrites master, every slot (and the mirror, BF16(master)) for `range`
  // (inside owned(), any chunks) from FP32 arrays of range.size() elements,
  // `slots` in the rule's order (INVALID_ARGUMENT for another count, or a
  // non-finite state value): a restore. 8-bit slots quantize the values
  // (the range then covers whole blocks: CheckWholeBlocks).
  absl::Status WriteState(FlatRange range, const float* master,
                          absl::Span<const float* const> slots);
  // Overwrites the whole owned range from master (owned().size() floats)
  // and each slot's image: an FP32 slot's values, or an 8-bit slot's
  // owned().size() codes followed by its Q8Blocks(owned().size()) scales
  // (SlotBytes bytes): a restore of a file this range wrote, bit for bit.
  absl::Status WriteStateImages(const float* master,
                                absl::Span<const void* const> images);

  // Calls `f` with chunk c's arrays while holding its lock: nothing updates
  // the chunk meanwhile (a snapshot's copy). With the device placement the
  // arrays are host copies taken under the lock.
  struct ChunkArrays {
    FlatRange range;
    const float* master;
    // Per slot k < num_slots(): slots[k] for an FP32 slot; codes[k]
    // (range.size()) and absmax[k] (Q8Blocks(range.size())) for an 8-bit
    // one.
    std::array<const float*, kMaxStateSlots> slots;
    std::array<const uint8_t*, kMaxStateSlots> codes;
    std::array<const float*, kMaxStateSlots> absmax;
    // Slot k's values (dequantized when 8-bit) into out (range.size()).
    void Values(size_t k, const StateSlot& slot, float* out) const;
  };
  absl::Status WithChunkLocked(
      size_t c, absl::FunctionRef<void(const ChunkArrays&)> f) const;

  absl::StatusOr<StateNorms> Norms() const;
  // XXH3-64 of the master weights of the elements in `params` (sorted,
  // disjoint global ranges: the tensors' elements, the padding between them
  // left out), then of each state slot's values of them (8-bit slots
  // dequantized), each chunk under its lock: equal for two copies of a slot
  // that hold the same bits, however each is chunked (docs/DESIGN.md,
  // "Replicas").
  absl::StatusOr<uint64_t> Digest(absl::Span<const FlatRange> params) const;

  // OK, or the first device error: a failed copy or update leaves the
  // device state unknown, so every later call fails with it (the server
  // reports NOT_SERVING and the run restores from a checkpoint). Always OK
  // for the host placements.
  absl::Status fault() const;
  // Called once, with the fault, when the first one is recorded (the server
  // then reports NOT_SERVING). Set before the store is shared.
  void set_fault_listener(std::function<void(const absl::Status&)> f) {
    fault_listener_ = std::move(f);
  }
  // Records `fault` as a device error would (tests of the fault path on any
  // placement).
  void RecordFaultForTesting(absl::Status fault) const {
    RecordAny(std::move(fault)).IgnoreError();
  }

  // Bytes held by kind: "master", each slot by its name (AdamW: "exp_avg",
  // "exp_avg_sq"), "mirror", "pending_grads".
  std::map<std::string, uint64_t> BytesByKind() const;
  // Gradient bytes buffered by PushGrad streams awaiting their commit.
  void AddPendingGradBytes(int64_t delta) { pending_grad_bytes_ += delta; }
  uint64_t pending_grad_bytes() const { return pending_grad_bytes_.load(); }
  // Adds `bytes` unless the total would exceed pending_grad_limit(); false
  // (and nothing added) otherwise.
  bool TryAddPendingGradBytes(uint64_t bytes);
  // The cap on pending_grad_bytes(); 0 (unset) means
  // DefaultPendingGradLimit().
  void set_pending_grad_limit(uint64_t bytes) { pending_grad_limit_ = bytes; }
  uint64_t pending_grad_limit() const {
    return pending_grad_limit_ != 0 ? pending_grad_limit_
                                    : DefaultPendingGradLimit();
  }
  // Twice one step's FP32 gradients for the owned range (a step and a retry
  // of it in flight), plus 64 MiB.
  uint64_t DefaultPendingGradLimit() const {
    return 2 * owned_.size() * sizeof(float) + (uint64_t{64} << 20);
  }

 private:
  ShardStore() = default;
  bool on_device() const { return placement_ == Placement::kDevice; }
  absl::Status FinishFill();
  // The arrays of owned elements [i, i + n), i a block boundary.
  StateSlice SliceAt(size_t i, size_t n) const;
  // 8-bit slot k's map and the code of 0 in it.
  Quant8Map MapOf(size_t k) const;
  uint8_t ZeroCodeOf(size_t k) const;
  absl::Status ApplyBlockwise(size_t c, absl::Span<const ChunkUpdate> updates,
                              OptimizerPool* pool);
  // Records a device error from a write of the state as the store's fault
  // (not a failed allocation: nothing was written); returns `status`.
  absl::Status Record(absl::Status status) const;
  // The same for every error code (updates: see ApplyUpdatesInChunk).
  absl::Status RecordAny(absl::Status status) const;
  // Device: writes master[i, i + n) from host `master` and the mirror from
  // its rounding.
  absl::Status PutMasterAndMirror(size_t i, const float* master, size_t n);
  // Calls f(i, src, n) for each run of `range` inside one chunk, under that
  // chunk's lock: i is the run's index into the owned arrays, src its index
  // into `range`, n its length.
  absl::Status ForEachChunkRun(
      FlatRange range,
      absl::FunctionRef<absl::Status(size_t, size_t, size_t)> f);

  // Constant after construction.
  FlatRange owned_;
  uint64_t chunk_elems_ = 0;
  size_t num_chunks_ = 0;
  Placement placement_ = Placement::kHost;
  const UpdateRule* rule_ = nullptr;
  size_t num_slots_ = 0;
  StateBuffer master_buf_, mirror_buf_;
  // An FP32 slot's values, or an 8-bit slot's codes (its scales in
  // absmax_bufs_).
  StateBuffer slot_bufs_[kMaxStateSlots];
  StateBuffer absmax_bufs_[kMaxStateSlots];
  float* master_ = nullptr;
  std::array<float*, kMaxStateSlots> slots_{};  // null for an 8-bit slot
  std::array<uint8_t*, kMaxStateSlots> codes_{};
  std::array<float*, kMaxStateSlots> absmax_{};
  uint16_t* mirror_ = nullptr;

  // chunk_mu_[c] guards the elements of chunk c in every array.
  std::unique_ptr<absl::Mutex[]> chunk_mu_;
  std::atomic<int64_t> pending_grad_bytes_{0};
  uint64_t pending_grad_limit_ = 0;  // set before the store is shared
  mutable absl::Mutex fault_mu_;
  mutable absl::Status fault_ ABSL_GUARDED_BY(fault_mu_);
  std::function<void(const absl::Status&)> fault_listener_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_STORE_H_
