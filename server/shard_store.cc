#include "server/xxh3_stream.h"
#include "server/shard_store.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/init_values.h"
#include "common/status_macros.h"
#include "optim/quant8.h"
#include "server/device_transfer.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(
    FlatRange owned, uint64_t chunk_elems, Placement placement,
    const UpdateRule& rule) {
  if (chunk_elems == 0 || chunk_elems % kFlatAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_elems (", chunk_elems, ") must be a positive multiple of ",
        kFlatAlignment));
  }
  if (owned.end < owned.begin) {
    return absl::InvalidArgumentError("owned range ends before it begins");
  }
  const absl::Span<const StateSlot> slots = rule.slots();
  if (slots.size() > kMaxStateSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer rule ", rule.name(), " declares ", slots.size(),
        " state slots; the store holds at most ", kMaxStateSlots));
  }
  if (rule.quantized()) {
    // Blocks never straddle chunks: each chunk's update quantizes whole
    // blocks under its own lock.
    if (chunk_elems % kQ8SlotBlock != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk_elems (", chunk_elems, ") must be a multiple of ",
          kQ8SlotBlock, " under optimizer rule ", rule.name(),
          " (its 8-bit state has one scale per ", kQ8SlotBlock,
          " elements)"));
    }
    if (placement == Placement::kDevice) {
      return absl::FailedPreconditionError(absl::StrCat(
          "optimizer rule ", rule.name(), " keeps 8-bit state on the host "
          "only: use placement host or pinned"));
    }
  }
  // master (4) + slots + mirror (2) bytes per element. Refuse what this
  // machine cannot hold rather than be killed while filling it.
  uint64_t slot_bytes = 0;
  for (const StateSlot& slot : slots) slot_bytes += SlotBytes(slot.format, owned.size());
  const unsigned __int128 need =
      static_cast<unsigned __int128>(owned.size()) * 6 + slot_bytes;
  const unsigned __int128 have =
      static_cast<unsigned __int128>(sysconf(_SC_PHYS_PAGES)) *
      static_cast<unsigned __int128>(sysconf(_SC_PAGESIZE));
  if (placement != Placement::kDevice && have > 0 && need > have) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the owned range of ", owned.size(), " elements needs ",
        static_cast<uint64_t>(need), " bytes of state; this machine has ",
        static_cast<uint64_t>(have), " bytes of memory (add servers)"));
  }
  std::unique_ptr<ShardStore> store(new ShardStore());
  store->owned_ = owned;
  store->chunk_elems_ = chunk_elems;
  store->num_chunks_ = (owned.size() + chunk_elems - 1) / chunk_elems;
  store->placement_ = placement;
  store->rule_ = &rule;
  store->num_slots_ = slots.size();
  const size_t n = owned.size();
  ASSIGN_OR_RETURN(store->master_buf_, StateBuffer::Allocate(placement, 4 * n));
  for (size_t k = 0; k < slots.size(); ++k) {
    if (slots[k].format == SlotFormat::kFp32) {
      ASSIGN_OR_RETURN(store->slot_bufs_[k],
                       StateBuffer::Allocate(placement, 4 * n));
      store->slots_[k] = static_cast<float*>(store->slot_bufs_[k].data());
      continue;
    }
    ASSIGN_OR_RETURN(store->slot_bufs_[k], StateBuffer::Allocate(placement, n));
    ASSIGN_OR_RETURN(store->absmax_bufs_[k],
                     StateBuffer::Allocate(placement, 4 * Q8Blocks(n)));
    store->codes_[k] = static_cast<uint8_t*>(store->slot_bufs_[k].data());
    store->absmax_[k] = static_cast<float*>(store->absmax_bufs_[k].data());
  }
  ASSIGN_OR_RETURN(store->mirror_buf_, StateBuffer::Allocate(placement, 2 * n));
  store->master_ = static_cast<float*>(store->master_buf_.data());
  store->mirror_ = static_cast<uint16_t*>(store->mirror_buf_.data());
  store->chunk_mu_ = std::make_unique<absl::Mutex[]>(store->num_chunks_);
  return store;
}

FlatRange ShardStore::ChunkRange(size_t c) const {
  const uint64_t begin = owned_.begin + c * chunk_elems_;
  return {begin, std::min(owned_.end, begin + chunk_elems_)};
}

size_t ShardStore::ChunkOf(uint64_t offset) const {
  return (offset - owned_.begin) / chunk_elems_;
}

absl::Status ShardStore::Record(absl::Status status) const {
  // A failed allocation (device_transfer allocates before it writes) changed
  // nothing: the call fails, the state stands.
  if (status.ok() || absl::IsResourceExhausted(status)) return status;
  return RecordAny(std::move(status));
}

absl::Status ShardStore::RecordAny(absl::Status status) const {
  if (status.ok()) return status;
  absl::Status first;
  {
    absl::MutexLock lock(&fault_mu_);
    if (!fault_.ok()) return status;
    fault_ = absl::Status(status.code(),
                          absl::StrCat("the shard's device state is lost: ",
                                       status.message()));
    first = fault_;
  }
  if (fault_listener_) fault_listener_(first);
  return status;
}

absl::Status ShardStore::fault() const {
  absl::MutexLock lock(&fault_mu_);
  return fault_;
}

absl::Status ShardStore::PutMasterAndMirror(size_t i, const float* master,
                                            size_t n) {
  // Device only: the mirror is rounded on the host (the same FloatToBf16
  // as every other path) and both are copied up.
  thread_local std::vector<uint16_t> mirror;
  mirror.resize(n);
  FloatToBf16Array(master, mirror.data(), n);
  RETURN_IF_ERROR(Record(CopyHostToDevice(master_ + i, master, n * sizeof(float))));
  return Record(CopyHostToDevice(mirror_ + i, mirror.data(), n * sizeof(uint16_t)));
}

absl::Status ShardStore::FillSeeded(const FlatLayout& layout, uint64_t seed,
                                    double std) {
  RETURN_IF_ERROR(fault());
  thread_local std::vector<float> staging;
  // Chunk by chunk, so that each page is first touched by its fill.
  for (size_t c = 0; c < num_chunks_; ++c) {
    const FlatRange r = ChunkRange(c);
    const size_t i = r.begin - owned_.begin;
    absl::MutexLock lock(&chunk_mu_[c]);
    if (on_device()) {
      staging.resize(r.size());
      FillInitialValues(layout, seed, std, r, staging.data());
      RETURN_IF_ERROR(PutMasterAndMirror(i, staging.data(), r.size()));
    } else {
      FillInitialValues(layout, seed, std, r, master_ + i);
    }
  }
  return FinishFill();
}

absl::Status ShardStore::FillZeros() {
  RETURN_IF_ERROR(fault());
  if (owned_.size() > 0) {
    if (on_device()) {
      // BF16(0.0f) is the zero bit pattern too.
      RETURN_IF_ERROR(Record(ZeroDevice(master_, owned_.size() * sizeof(float))));
      RETURN_IF_ERROR(
          Record(ZeroDevice(mirror_, owned_.size() * sizeof(uint16_t))));
    } else {
      std::memset(master_, 0, owned_.size() * sizeof(float));
    }
  }
  return FinishFill();
}

absl::Status ShardStore::FinishFill() {
  for (size_t c = 0; c < num_chunks_; ++c) {
    const FlatRange r = ChunkRange(c);
    const size_t i = r.begin - owned_.begin;
    absl::MutexLock lock(&chunk_mu_[c]);
    if (on_device()) {
      for (size_t k = 0; k < num_slots_; ++k) {
        RETURN_IF_ERROR(
            Record(ZeroDevice(slots_[k] + i, r.size() * sizeof(float))));
      }
    } else {
      for (size_t k = 0; k < num_slots_; ++k) {
        if (slots_[k] != nullptr) {
          std::memset(slots_[k] + i, 0, r.size() * sizeof(float));
          continue;
        }
        std::memset(codes_[k] + i, ZeroCodeOf(k), r.size());
        std::fill_n(absmax_[k] + i / kQ8SlotBlock, Q8Blocks(r.size()), 0.0f);
      }
      FloatToBf16Array(master_ + i, mirror_ + i, r.size());
    }
  }
  return absl::OkStatus();
}

StateSlice ShardStore::SliceAt(size_t i, size_t n) const {
  StateSlice slice{.master = master_ + i, .mirror = mirror_ + i, .n = n};
  for (size_t k = 0; k < num_slots_; ++k) {
    if (slots_[k] != nullptr) {
      slice.slots[k] = slots_[k] + i;
    } else {
      slice.codes[k] = codes_[k] + i;
      slice.absmax[k] = absmax_[k] + i / kQ8SlotBlock;
    }
  }
  return slice;
}

uint8_t ShardStore::ZeroCodeOf(size_t k) const { return ZeroCode(MapOf(k)); }

absl::Status ShardStore::CheckWholeBlocks(
    absl::Span<const FlatRange> ranges) const {
  if (!rule_->quantized()) return absl::OkStatus();
  // Sorted, each contiguous run must start and end on a block boundary
  // (or the owned range's end).
  std::vector<FlatRange> sorted(ranges.begin(), ranges.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  auto on_boundary = [&](uint64_t x) {
    return (x - owned_.begin) % kQ8SlotBlock == 0 || x == owned_.end;
  };
  for (size_t k = 0; k < sorted.size(); ++k) {
    if (sorted[k].empty()) continue;
    const bool starts = k == 0 || sorted[k - 1].end != sorted[k].begin;
    const bool ends = k + 1 == sorted.size() || sorted[k + 1].begin != sorted[k].end;
    const uint64_t bad = starts && !on_boundary(sorted[k].begin) ? sorted[k].begin
                         : ends && !on_boundary(sorted[k].end)   ? sorted[k].end
                                                                 : UINT64_MAX;
    if (bad != UINT64_MAX) {
      const uint64_t block = owned_.begin + (bad - owned_.begin) / kQ8SlotBlock * kQ8SlotBlock;
      return absl::FailedPreconditionError(absl::StrCat(
          "optimizer rule ", rule_->name(), " keeps 8-bit state with one scale per ",
          kQ8SlotBlock, " elements: a step's gradient must cover whole blocks in one "
          "apply (a two-phase commit, as zeroshard-train's workers make, or pushes "
          "that end on block boundaries); this one ends at ", bad, ", inside the block [",
          block, ", ", std::min(owned_.end, block + kQ8SlotBlock), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardStore::ApplyBlockwise(size_t c,
                                        absl::Span<const ChunkUpdate> updates,
                                        OptimizerPool* pool) {
  std::vector<FlatRange> ranges;
  ranges.reserve(updates.size());
  for (const ChunkUpdate& u : updates) ranges.push_back(u.range);
  // The caller checked this before claiming (ModelShard::ApplyPieces); a
  // violation here is a bug, and poisons as any failed update does.
  RETURN_IF_ERROR(RecordAny(CheckWholeBlocks(ranges)));
  std::vector<size_t> order(updates.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return updates[a].range.begin < updates[b].range.begin;
  });
  // Tasks of at most kTaskBlocks whole blocks, each over contiguous updates.
  constexpr uint64_t kTaskBlocks = 16;
  struct Task {
    FlatRange range;
    std::vector<RulePart> parts;
  };
  std::vector<Task> tasks;
  for (size_t k = 0; k < order.size(); ++k) {
    const ChunkUpdate& u = updates[order[k]];
    uint64_t pos = u.range.begin;
    while (pos < u.range.end) {
      // A task starts at a gap (a block boundary: checked above) or where
      // the one before is full (a block boundary too).
      const bool fresh =
          tasks.empty() || tasks.back().range.end != pos ||
          tasks.back().range.size() >= kTaskBlocks * kQ8SlotBlock;
      if (fresh) tasks.push_back({{pos, pos}, {}});
      Task& t = tasks.back();
      const uint64_t end =
          std::min(u.range.end, t.range.begin + kTaskBlocks * kQ8SlotBlock);
      const size_t esize = u.grad.bf16 ? sizeof(uint16_t) : sizeof(float);
      const GradView g{static_cast<const char*>(u.grad.data) +
                           (pos - u.range.begin) * esize,
                       u.grad.bf16};
      t.parts.push_back({u.step, g, pos - t.range.begin, end - pos});
      t.range.end = end;
      pos = end;
    }
  }
  absl::Mutex error_mu;
  absl::Status first_error;
  auto run = [&](size_t lo, size_t hi) {
    for (size_t k = lo; k < hi; ++k) {
      const Task& t = tasks[k];
      absl::Status s = RecordAny(rule_->UpdateParts(
          t.parts, SliceAt(t.range.begin - owned_.begin, t.range.size())));
      if (!s.ok()) {
        absl::MutexLock lock(&error_mu);
        if (first_error.ok()) first_error = std::move(s);
      }
    }
  };
  absl::MutexLock lock(&chunk_mu_[c]);
  if (pool == nullptr || tasks.size() < 2) {
    run(0, tasks.size());
  } else {
    pool->ParallelFor(tasks.size(), 1, run);
  }
  return first_error;
}

absl::Status ShardStore::ApplyUpdatesInChunk(
    size_t c, absl::Span<const ChunkUpdate> updates, OptimizerPool* pool) {
  RETURN_IF_ERROR(fault());
  if (rule_->quantized()) return ApplyBlockwise(c, updates, pool);
  absl::Mutex error_mu;
  absl::Status first_error;
  auto apply = [&](size_t lo, size_t hi) {
    for (size_t k = lo; k < hi; ++k) {
      const ChunkUpdate& u = updates[k];
      const size_t i = u.range.begin - owned_.begin;
      StateSlice slice{.master = master_ + i,
                       .mirror = mirror_ + i,
                       .n = u.range.size()};
      for (size_t k = 0; k < num_slots_; ++k) slice.slots[k] = slots_[k] + i;
      if (!on_device()) {
        rule_->Update(u.step, u.grad, slice).IgnoreError();  // FP32: always OK
        continue;
      }
      // Any failure poisons: the step's claim on the chunk stands, so an
      // update that did not happen must not pass for one.
      absl::Status s = RecordAny(UpdateFromHost(*rule_, u.step, u.grad, slice));
      if (!s.ok()) {
        absl::MutexLock lock(&error_mu);
        if (first_error.ok()) first_error = std::move(s);
        return;
      }
    }
  };
  absl::MutexLock lock(&chunk_mu_[c]);
  if (pool == nullptr || updates.size() < 2) {
    apply(0, updates.size());
  } else {
    pool->ParallelFor(updates.size(), 1, apply);
  }
  return first_error;
}

absl::Status ShardStore::UpdateWholeRange(
    FlatRange range, absl::FunctionRef<absl::Status(const StateSlice&)> f) {
  RETURN_IF_ERROR(fault());
  if (on_device()) {
    return absl::FailedPreconditionError(
        "a whole-tensor update on device state (this build has no device "
        "kernel for tensor rules)");
  }
  if (rule_->quantized()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a whole-tensor update over optimizer rule ", rule_->name(),
        "'s 8-bit slots (tensor rules keep their state in FP32 slots)"));
  }
  if (range.empty()) return absl::OkStatus();
  thread_local std::vector<float> copies[1 + kMaxStateSlots];
  for (size_t k = 0; k <= num_slots_; ++k) copies[k].resize(range.size());
  // Kept between calls for small tensors; a large one's copies are freed on
  // the way out, or every gRPC thread that ever updated it would keep them
  // (Adafactor on GPT-2 124M's token embedding: 3 x 154 MB).
  absl::Cleanup free_large = [&] {
    if (range.size() <= kKeptScratchElems) return;
    for (std::vector<float>& c : copies) std::vector<float>().swap(c);
  };
  auto array = [&](size_t k) { return k == 0 ? master_ : slots_[k - 1]; };
  auto for_each_run = [&](auto&& fn) {
    uint64_t pos = range.begin;
    while (pos < range.end) {
      const size_t c = ChunkOf(pos);
      const uint64_t end = std::min(range.end, ChunkRange(c).end);
      absl::MutexLock lock(&chunk_mu_[c]);
      fn(pos - owned_.begin, pos - range.begin, end - pos);
      pos = end;
    }
  };
  for_each_run([&](size_t i, size_t at, size_t n) {
    for (size_t k = 0; k <= num_slots_; ++k) {
      std::memcpy(copies[k].data() + at, array(k) + i, n * sizeof(float));
    }
  });
  StateSlice slice{.master = copies[0].data(), .n = range.size()};
  for (size_t k = 0; k < num_slots_; ++k) slice.slots[k] = copies[1 + k].data();
  // A failure poisons, as a device update's does: the step's claim on the
  // chunks stands, so a tensor left behind must not pass for updated.
  RETURN_IF_ERROR(RecordAny(f(slice)));
  for_each_run([&](size_t i, size_t at, size_t n) {
    for (size_t k = 0; k <= num_slots_; ++k) {
      std::memcpy(array(k) + i, copies[k].data() + at, n * sizeof(float));
    }
    FloatToBf16Array(master_ + i, mirror_ + i, n);
  });
  return absl::OkStatus();
}

absl::Status ShardStore::Read(FlatRange range, DType dtype, void* out) const {
  RETURN_IF_ERROR(fault());
  const size_t i = range.begin - owned_.begin;
  const bool bf16 = dtype == DType::kBf16;
  const void* src = bf16 ? static_cast<const void*>(mirror_ + i)
                         : static_cast<const void*>(master_ + i);
  const size_t bytes = range.size() * (bf16 ? sizeof(uint16_t) : sizeof(float));
  absl::MutexLock lock(&chunk_mu_[ChunkOf(range.begin)]);
  if (on_device()) return CopyDeviceToHost(out, src, bytes);  // state intact
  std::memcpy(out, src, bytes);
  return absl::OkStatus();
}

absl::Status ShardStore::ForEachChunkRun(
    FlatRange range, absl::FunctionRef<absl::Status(size_t, size_t, size_t)> f) {
  uint64_t pos = range.begin;
  while (pos < range.end) {
    const size_t c = ChunkOf(pos);
    const uint64_t end = std::min(range.end, ChunkRange(c).end);
    absl::MutexLock lock(&chunk_mu_[c]);
    RETURN_IF_ERROR(f(pos - owned_.begin, pos - range.begin, end - pos));
    pos = end;
  }
  return absl::OkStatus();
}

absl::Status ShardStore::WriteWeights(FlatRange range, DType dtype,
                                      const void* data) {
  RETURN_IF_ERROR(fault());
  thread_local std::vector<float> staging;
  return ForEachChunkRun(range, [&](size_t i, size_t src, size_t n) {
    float* master = master_ + i;
    if (on_device()) {
      staging.resize(n);
      master = staging.data();
    }
    if (dtype == DType::kBf16) {
      Bf16ToFloatArray(static_cast<const uint16_t*>(data) + src, master, n);
    } else {
      std::memcpy(master, static_cast<const float*>(data) + src,
                  n * sizeof(float));
    }
    if (on_device()) return PutMasterAndMirror(i, master, n);
    FloatToBf16Array(master, mirror_ + i, n);
    return absl::OkStatus();
  });
}

absl::Status ShardStore::WriteSlot(FlatRange range, size_t slot,
                                   const float* data) {
  RETURN_IF_ERROR(fault());
  if (slot >= num_slots_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteSlot: slot ", slot, " of optimizer rule ", rule_->name(),
        ", which keeps ", num_slots_));
  }
  if (slots_[slot] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteSlot: state '", rule_->slots()[slot].name, "' of ",
        rule_->name(), " is kept in 8 bits; it is written whole by a restore "
        "only"));
  }
  return ForEachChunkRun(range, [&](size_t i, size_t src, size_t n) {
    if (on_device()) {
      return Record(CopyHostToDevice(slots_[slot] + i, data + src,
                                     n * sizeof(float)));
    }
    std::memcpy(slots_[slot] + i, data + src, n * sizeof(float));
    return absl::OkStatus();
  });
}

absl::Status ShardStore::WriteState(FlatRange range, const float* master,
                                    absl::Span<const float* const> slots) {
  RETURN_IF_ERROR(fault());
  if (slots.size() != num_slots_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteState: ", slots.size(), " state arrays for optimizer rule ",
        rule_->name(), ", which keeps ", num_slots_));
  }
  const FlatRange whole[] = {range};
  RETURN_IF_ERROR(CheckWholeBlocks(whole));
  return ForEachChunkRun(range, [&](size_t i, size_t src, size_t n) {
    const size_t bytes = n * sizeof(float);
    if (on_device()) {
      for (size_t k = 0; k < num_slots_; ++k) {
        RETURN_IF_ERROR(
            Record(CopyHostToDevice(slots_[k] + i, slots[k] + src, bytes)));
      }
      return PutMasterAndMirror(i, master + src, n);
    }
    for (size_t k = 0; k < num_slots_; ++k) {
      if (slots_[k] != nullptr) continue;  // 8-bit slots quantize finite values
      for (size_t e = 0; e < n; ++e) {
        if (!std::isfinite(slots[k][src + e])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "WriteState: element ", src + e, " of state '",
              rule_->slots()[k].name, "' is not finite"));
        }
      }
    }
    std::memcpy(master_ + i, master + src, bytes);
    for (size_t k = 0; k < num_slots_; ++k) {
      if (slots_[k] != nullptr) {
        std::memcpy(slots_[k] + i, slots[k] + src, bytes);
        continue;
      }
      QuantizeBlockwise(slots[k] + src, n, kQ8SlotBlock, MapOf(k),
                        codes_[k] + i, absmax_[k] + i / kQ8SlotBlock);
    }
    FloatToBf16Array(master_ + i, mirror_ + i, n);
    return absl::OkStatus();
  });
}

absl::Status ShardStore::WriteStateImages(
    const float* master, absl::Span<const void* const> images) {
  RETURN_IF_ERROR(fault());
  if (images.size() != num_slots_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteStateImages: ", images.size(), " state arrays for optimizer "
        "rule ", rule_->name(), ", which keeps ", num_slots_));
  }
  const uint64_t total = owned_.size();
  return ForEachChunkRun(owned_, [&](size_t i, size_t src, size_t n) {
    const size_t bytes = n * sizeof(float);
    if (on_device()) {
      for (size_t k = 0; k < num_slots_; ++k) {
        RETURN_IF_ERROR(Record(CopyHostToDevice(
            slots_[k] + i, static_cast<const float*>(images[k]) + src, bytes)));
      }
      return PutMasterAndMirror(i, master + src, n);
    }
    std::memcpy(master_ + i, master + src, bytes);
    for (size_t k = 0; k < num_slots_; ++k) {
      const char* image = static_cast<const char*>(images[k]);
      if (slots_[k] != nullptr) {
        std::memcpy(slots_[k] + i, image + src * sizeof(float), bytes);
        continue;
      }
      std::memcpy(codes_[k] + i, image + src, n);
      std::memcpy(absmax_[k] + i / kQ8SlotBlock,
                  image + total + src / kQ8SlotBlock * sizeof(float),
                  Q8Blocks(n) * sizeof(float));
    }
    FloatToBf16Array(master_ + i, mirror_ + i, n);
    return absl::OkStatus();
  });
}

Quant8Map ShardStore::MapOf(size_t k) const {
  return Quant8MapOf(rule_->slots()[k].format);
}

absl::Status ShardStore::WithChunkLocked(
    size_t c, absl::FunctionRef<void(const ChunkArrays&)> f) const {
  RETURN_IF_ERROR(fault());
  const FlatRange r = ChunkRange(c);
  const size_t i = r.begin - owned_.begin;
  absl::MutexLock lock(&chunk_mu_[c]);
  ChunkArrays a{r, master_ + i, {}, {}, {}};
  for (size_t k = 0; k < num_slots_; ++k) {
    if (slots_[k] != nullptr) {
      a.slots[k] = slots_[k] + i;
    } else {
      a.codes[k] = codes_[k] + i;
      a.absmax[k] = absmax_[k] + i / kQ8SlotBlock;
    }
  }
  if (!on_device()) {
    f(a);
    return absl::OkStatus();
  }
  // Host copies of the chunk, taken under its lock (device slots are FP32).
  thread_local std::vector<float> copies[1 + kMaxStateSlots];
  auto copy = [&](size_t k, const float*& array) -> absl::Status {
    copies[k].resize(r.size());
    RETURN_IF_ERROR(
        CopyDeviceToHost(copies[k].data(), array, r.size() * sizeof(float)));
    array = copies[k].data();
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(copy(0, a.master));
  for (size_t k = 0; k < num_slots_; ++k) RETURN_IF_ERROR(copy(1 + k, a.slots[k]));
  f(a);
  return absl::OkStatus();
}

void ShardStore::ChunkArrays::Values(size_t k, const StateSlot& slot,
                                     float* out) const {
  if (slots[k] != nullptr) {
    std::memcpy(out, slots[k], range.size() * sizeof(float));
    return;
  }
  DequantizeBlockwise(codes[k], absmax[k], range.size(), kQ8SlotBlock,
                      Quant8MapOf(slot.format),
                      out);
}

bool ShardStore::TryAddPendingGradBytes(uint64_t bytes) {
  const int64_t limit = static_cast<int64_t>(pending_grad_limit());
  int64_t now = pending_grad_bytes_.load();
  do {
    if (bytes > static_cast<uint64_t>(limit) ||
        now > limit - static_cast<int64_t>(bytes)) {
      return false;
    }
  } while (!pending_grad_bytes_.compare_exchange_weak(
      now, now + static_cast<int64_t>(bytes)));
  return true;
}

absl::StatusOr<StateNorms> ShardStore::Norms() const {
  double sums[1 + kMaxStateSlots] = {};
  auto add = [](double& sum, const float* x, size_t n) {
    for (size_t k = 0; k < n; ++k) sum += static_cast<double>(x[k]) * x[k];
  };
  thread_local std::vector<float> values;
  for (size_t c = 0; c < num_chunks_; ++c) {
    RETURN_IF_ERROR(WithChunkLocked(c, [&](const ChunkArrays& a) {
      add(sums[0], a.master, a.range.size());
      for (size_t k = 0; k < num_slots_; ++k) {
        values.resize(a.range.size());
        a.Values(k, rule_->slots()[k], values.data());
        add(sums[1 + k], values.data(), a.range.size());
      }
    }));
  }
  StateNorms norms{std::sqrt(sums[0]), {}};
  for (size_t k = 0; k < num_slots_; ++k) {
    norms.slots.push_back(std::sqrt(sums[1 + k]));
  }
  return norms;
}

absl::StatusOr<uint64_t> ShardStore::Digest(
    absl::Span<const FlatRange> params) const {
  Xxh3Stream hash;
  thread_local std::vector<float> values;
  // Array 0 is the master weights, array 1 + k slot k's values: each whole
  // before the next, so the bytes hashed do not depend on the chunking.
  for (size_t array = 0; array <= num_slots_; ++array) {
    size_t first = 0;  // the first of `params` that may meet this chunk
    for (size_t c = 0; c < num_chunks_; ++c) {
      RETURN_IF_ERROR(WithChunkLocked(c, [&](const ChunkArrays& a) {
        const float* src = a.master;
        if (array > 0) {
          values.resize(a.range.size());
          a.Values(array - 1, rule_->slots()[array - 1], values.data());
          src = values.data();
        }
        while (first < params.size() && params[first].end <= a.range.begin) {
          ++first;
        }
        for (size_t p = first; p < params.size() && params[p].begin < a.range.end;
             ++p) {
          const FlatRange piece = Intersect(params[p], a.range);
          if (piece.size() == 0) continue;
          hash.Update(src + (piece.begin - a.range.begin),
                      piece.size() * sizeof(float));
        }
      }));
    }
  }
  return hash.Digest();
}

std::map<std::string, uint64_t> ShardStore::BytesByKind() const {
  std::map<std::string, uint64_t> bytes = {
      {"master", master_buf_.bytes()},
      {"mirror", mirror_buf_.bytes()},
      {"pending_grads", pending_grad_bytes()}};
  for (size_t k = 0; k < num_slots_; ++k) {
    bytes[rule_->slots()[k].name] =
        slot_bufs_[k].bytes() + absmax_bufs_[k].bytes();
  }
  return bytes;
}

}  // namespace zeroshard
