#include "worker/engine/unit_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zeroshard {

UnitCache::UnitCache(const FlatLayout* layout, int rank, DType dtype,
                     bool resident, WorkerGroup* group, CommQueue* queue)
    : layout_(layout),
      rank_(rank),
      dtype_(dtype),
      resident_(resident),
      group_(group),
      queue_(queue) {
  const size_t es = DTypeSize(dtype_);
  size_t off = 0;
  for (size_t u = 0; u < layout_->units().size(); ++u) {
    part_offset_.push_back(off);
    off += layout_->WorkerUnitRange(rank_, static_cast<int>(u)).size() * es;
  }
  partition_.resize(off);
  slots_.resize(layout_->units().size());
}

UnitCache::~UnitCache() { (void)ReleaseAll(); }

void UnitCache::StartGather(int unit) {
  Slot& slot = slots_[unit];
  if (direct()) {
    slot.present = true;
    return;
  }
  const size_t es = DTypeSize(dtype_);
  const uint64_t padded = layout_->units()[unit].padded;
  // Reuse a released buffer that is large enough: no allocation, no zero
  // fill, no page faults (every byte is overwritten by the gather).
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].size() >= padded * es) {
      slot.buffer = std::move(spare_[i]);
      spare_.erase(spare_.begin() + i);
      break;
    }
  }
  if (slot.buffer.size() < padded * es) {
    slot.buffer.resize(padded * es);
  } else {
    spare_bytes_ -= slot.buffer.size();
  }
  live_bytes_ += slot.buffer.size();
  peak_bytes_ = std::max(peak_bytes_, live_bytes_ + spare_bytes_);
  slot.present = true;
  const size_t part_bytes =
      layout_->WorkerUnitRange(rank_, unit).size() * es;
  uint8_t* dst = slot.buffer.data();
  const uint8_t* src = partition_.data() + part_offset_[unit];
  slot.ticket = queue_->Submit([this, dst, src, part_bytes, unit] {
    std::memcpy(dst + static_cast<size_t>(rank_) * part_bytes, src, part_bytes);
    absl::Span<uint8_t> out(dst, part_bytes * group_->size());
    absl::Status s = group_->AllGatherInPlace(out);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("all-gather of unit '",
                                                 layout_->units()[unit].name,
                                                 "': ", s.message()));
    }
    return absl::OkStatus();
  });
}

void UnitCache::Prefetch(int unit) {
  if (unit < 0 || unit >= static_cast<int>(slots_.size())) return;
  if (!slots_[unit].present) StartGather(unit);
}

absl::StatusOr<model::UnitParams> UnitCache::Acquire(int unit) {
  if (unit < 0 || unit >= static_cast<int>(slots_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no unit ", unit));
  }
  Slot& slot = slots_[unit];
  if (!slot.present) StartGather(unit);
  absl::Status s = slot.ticket.Wait();
  if (!s.ok()) return s;
  model::UnitParams p;
  p.data = direct() ? partition_.data() + part_offset_[unit]
                    : slot.buffer.data();
  p.length = layout_->units()[unit].padded;
  p.dtype = dtype_;
  return p;
}

void UnitCache::Release(int unit) {
  if (resident_) return;
  Slot& slot = slots_[unit];
  if (!slot.present) return;
  if (direct()) {
    slot.present = false;
    return;
  }
  (void)slot.ticket.Wait();  // never free a buffer a gather still writes
  live_bytes_ -= slot.buffer.size();
  if (spare_.size() < kMaxSpares) {
    // Kept for the next gather; counted in the peak with the live buffers.
    spare_bytes_ += slot.buffer.size();
    spare_.push_back(std::move(slot.buffer));
    peak_bytes_ = std::max(peak_bytes_, live_bytes_ + spare_bytes_);
  }
  std::vector<uint8_t>().swap(slot.buffer);
  slot.ticket = CommTicket();
  slot.present = false;
}

absl::Status UnitCache::ReleaseAll() {
  absl::Status first;
  for (Slot& slot : slots_) {
    if (!slot.present) continue;
    absl::Status s = slot.ticket.Wait();
    if (first.ok() && !s.ok()) first = s;
    live_bytes_ -= slot.buffer.size();
    std::vector<uint8_t>().swap(slot.buffer);
    slot.ticket = CommTicket();
    slot.present = false;
  }
  return first;
}

absl::Status UnitCache::GatherAll() {
  for (size_t u = 0; u < slots_.size(); ++u) {
    if (!slots_[u].present) StartGather(static_cast<int>(u));
  }
  for (Slot& slot : slots_) {
    absl::Status s = slot.ticket.Wait();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
