#include "worker/engine/unit_cache.h"

#include <algorithm>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

CommTicket Failed(absl::Status s) {
  std::promise<absl::Status> p;
  p.set_value(std::move(s));
  return CommTicket(p.get_future().share());
}

}  // namespace

UnitCache::UnitCache(const FlatLayout* layout, int rank, DType dtype,
                     bool resident, WorkerGroup* group, CommQueue* queue,
                     model::ModelMemory* space)
    : layout_(layout),
      rank_(rank),
      dtype_(dtype),
      resident_(resident),
      group_(group),
      queue_(queue),
      space_(space) {
  const size_t es = DTypeSize(dtype_);
  size_t off = 0;
  for (size_t u = 0; u < layout_->units().size(); ++u) {
    part_offset_.push_back(off);
    off += layout_->WorkerUnitRange(rank_, static_cast<int>(u)).size() * es;
  }
  partition_.resize(off);
  slots_.resize(layout_->units().size());
  uploaded_.assign(layout_->units().size(), false);
  if (space_ != nullptr && !partition_.empty()) {
    // Uploaded every step: page-locked, the copy runs at the bus's speed.
    absl::Status s = space_->PinHost(partition_.data(), partition_.size());
    partition_pinned_ = s.ok();
    if (!s.ok()) {
      ZS_LOG(WARNING) << "the partition stays pageable (slower uploads): "
                      << s.message();
    }
  }
}

UnitCache::~UnitCache() {
  (void)ReleaseAll();
  for (Buffer& b : spare_) Free(&b);
  if (partition_model_ != nullptr) space_->Free(partition_model_);
  if (partition_pinned_) space_->UnpinHost(partition_.data());
}

absl::Status UnitCache::Allocate(size_t bytes, Buffer* b) {
  if (space_ == nullptr) {
    b->host.resize(bytes);
    b->data = b->host.data();
  } else {
    ASSIGN_OR_RETURN(void* p, space_->Allocate(bytes));
    b->data = static_cast<uint8_t*>(p);
  }
  b->size = bytes;
  return absl::OkStatus();
}

void UnitCache::Free(Buffer* b) {
  if (space_ != nullptr && b->data != nullptr) {
    // Work that still reads it finishes first.
    if (b->fence != nullptr) (void)b->fence->Wait();
    space_->Free(b->data);
  }
  *b = Buffer();
}

void UnitCache::Retire(Buffer* b) {
  if (space_ == nullptr || b->data == nullptr) return;
  absl::StatusOr<std::shared_ptr<model::ModelFence>> fence = space_->Fence();
  if (fence.ok()) {
    b->fence = *std::move(fence);
    return;
  }
  ZS_LOG(WARNING) << "a unit buffer is dropped, not reused: no fence ("
                  << fence.status().message() << ")";
  *b = Buffer();
}

const uint8_t* UnitCache::Part(int unit) const {
  return (partition_model_ != nullptr ? partition_model_ : partition_.data()) +
         part_offset_[unit];
}

absl::Status UnitCache::UploadPartition() {
  if (space_ == nullptr || partition_.empty()) return absl::OkStatus();
  // Each unit's part goes up on the queue when the unit is first gathered
  // (StartGather), so the copy of the next unit overlaps this one's compute.
  // Marked first: whatever fails below, no unit passes for uploaded.
  std::fill(uploaded_.begin(), uploaded_.end(), false);
  if (partition_model_ == nullptr) {
    ASSIGN_OR_RETURN(void* p, space_->Allocate(partition_.size()));
    partition_model_ = static_cast<uint8_t*>(p);
    upload_fence_.reset();
  } else {
    // One worker's model reads its units from here in place: its work on
    // the previous version ends before a part is overwritten (waited on by
    // the first upload).
    ASSIGN_OR_RETURN(upload_fence_, space_->Fence());
  }
  return absl::OkStatus();
}

absl::Status UnitCache::UploadPart(int unit) {
  absl::Status s =
      upload_fence_ != nullptr ? upload_fence_->Wait() : absl::OkStatus();
  if (s.ok()) {
    const size_t bytes =
        layout_->WorkerUnitRange(rank_, unit).size() * DTypeSize(dtype_);
    if (bytes == 0) return absl::OkStatus();
    s = space_->CopyToModel(partition_model_ + part_offset_[unit],
                            partition_.data() + part_offset_[unit], bytes);
  }
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("uploading unit '",
                                               layout_->units()[unit].name,
                                               "': ", s.message()));
  }
  return absl::OkStatus();
}

void UnitCache::StartGather(int unit) {
  Slot& slot = slots_[unit];
  // Model memory: this unit's part goes up first, once per version.
  const bool upload = partition_model_ != nullptr && !uploaded_[unit];
  if (upload) uploaded_[unit] = true;
  if (direct()) {
    slot.present = true;
    if (upload) {
      slot.ticket = queue_->Submit([this, unit] { return UploadPart(unit); });
    }
    // Otherwise the ticket of the upload (done or in flight) stays.
    return;
  }
  const size_t es = DTypeSize(dtype_);
  const uint64_t padded = layout_->units()[unit].padded;
  // Reuse a released buffer that is large enough: no allocation, no zero
  // fill, no page faults (every byte is overwritten by the gather).
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].size >= padded * es) {
      slot.buffer = std::move(spare_[i]);
      spare_[i] = Buffer();
      spare_.erase(spare_.begin() + i);
      spare_bytes_ -= slot.buffer.size;
      break;
    }
  }
  if (slot.buffer.size < padded * es) {
    Free(&slot.buffer);
    if (absl::Status s = Allocate(padded * es, &slot.buffer); !s.ok()) {
      slot.present = true;
      slot.ticket = Failed(absl::Status(
          s.code(), absl::StrCat("unit '", layout_->units()[unit].name,
                                 "': ", s.message())));
      return;
    }
  }
  live_bytes_ += slot.buffer.size;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_ + spare_bytes_);
  slot.present = true;
  const size_t part_bytes =
      layout_->WorkerUnitRange(rank_, unit).size() * es;
  uint8_t* dst = slot.buffer.data;
  const uint8_t* src = Part(unit);
  std::shared_ptr<model::ModelFence> fence = std::move(slot.buffer.fence);
  slot.ticket = queue_->Submit([this, dst, src, part_bytes, unit, upload,
                                fence = std::move(fence)] {
    absl::Span<uint8_t> out(dst, part_bytes * group_->size());
    absl::Status s;
    if (upload) s = UploadPart(unit);
    if (!s.ok()) return s;
    if (space_ == nullptr) {
      std::memcpy(dst + static_cast<size_t>(rank_) * part_bytes, src,
                  part_bytes);
      s = group_->AllGatherInPlace(out);
    } else {
      // The model's last reads of this buffer finish before it is
      // overwritten; the group's work finishes before the unit is used.
      if (fence != nullptr) s = fence->Wait();
      if (s.ok()) {
        s = group_->AllGather(absl::MakeConstSpan(src, part_bytes), out);
      }
      if (s.ok()) s = group_->Synchronize();
    }
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
  if (direct() && space_ != nullptr && partition_model_ == nullptr &&
      !partition_.empty()) {
    return absl::FailedPreconditionError(
        "the partition was not uploaded to model memory");
  }
  model::UnitParams p;
  p.data = direct() ? Part(unit) : slot.buffer.data;
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
  live_bytes_ -= slot.buffer.size;
  Retire(&slot.buffer);
  if (slot.buffer.data != nullptr && spare_.size() < kMaxSpares) {
    // Kept for the next gather; counted in the peak with the live buffers.
    spare_bytes_ += slot.buffer.size;
    spare_.push_back(std::move(slot.buffer));
    slot.buffer = Buffer();
    peak_bytes_ = std::max(peak_bytes_, live_bytes_ + spare_bytes_);
  } else {
    Free(&slot.buffer);
  }
  slot.ticket = CommTicket();
  slot.present = false;
}

absl::Status UnitCache::ReleaseAll() {
  absl::Status first;
  for (size_t u = 0; u < slots_.size(); ++u) {
    Slot& slot = slots_[u];
    // Direct: an upload may be in flight for a released unit; a failed one
    // is tried again at the next gather.
    absl::Status s = slot.ticket.Wait();
    if (!s.ok()) uploaded_[u] = false;
    if (slot.present && first.ok() && !s.ok()) first = s;
    if (!slot.present) {
      slot.ticket = CommTicket();
      continue;
    }
    live_bytes_ -= slot.buffer.size;
    Retire(&slot.buffer);
    Free(&slot.buffer);
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
