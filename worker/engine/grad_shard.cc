#include "worker/engine/grad_shard.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/grad_clip.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/engine/precision.h"

namespace zeroshard {

GradShard::GradShard(const FlatLayout* layout, int rank, WorkerGroup* group,
                     CommQueue* queue, model::ModelMemory* mem,
                     const GradShardOptions& options)
    : layout_(layout),
      rank_(rank),
      world_(group->size()),
      group_(group),
      queue_(queue),
      mem_(mem),
      options_(options) {}

GradShard::~GradShard() {
  // Model memory goes back before the model that owns it.
  resident_.clear();
  if (rs_model_ != nullptr) mem_->Free(rs_model_);
  for (void* p : pinned_) mem_->UnpinHost(p);
}

absl::StatusOr<std::unique_ptr<GradShard>> GradShard::Create(
    const FlatLayout* layout, int rank, WorkerGroup* group, CommQueue* queue,
    model::ModelMemory* mem, const GradShardOptions& options) {
  if (options.stage < 1 || options.stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_optimization.stage must be 1, 2 or 3, got ", options.stage));
  }
  std::unique_ptr<GradShard> g(
      new GradShard(layout, rank, group, queue, mem, options));
  g->direct_ = group->size() == 1 && options.stage >= 2 && mem == nullptr;
  const size_t units = layout->units().size();
  size_t off = 0, largest = 0;
  for (size_t u = 0; u < units; ++u) {
    g->offset_.push_back(off);
    const size_t n = layout->WorkerUnitRange(rank, static_cast<int>(u)).size();
    off += n;
    largest = std::max(largest, n);
  }
  g->shard_.assign(off, 0.0f);
  g->unit_sumsq_.assign(units, 0.0);
  if (options.bf16_wire) g->push_bf16_.assign(off, 0);
  if (options.stage == 1) {
    for (const UnitInfo& u : layout->units()) {
      ASSIGN_OR_RETURN(UnitGradPtr p, g->NewUnitGrad(u.padded));
      g->resident_.push_back(std::move(p));
    }
  }
  if (mem != nullptr) {
    // The parts come down into these (the comm thread never resizes
    // scratch_ then): page-locked, so the copies run at the bus's speed.
    g->scratch_.resize(largest);
    for (PageAlignedVector<float>* v : {&g->shard_, &g->scratch_}) {
      if (v->empty()) continue;
      absl::Status s = mem->PinHost(v->data(), v->size() * sizeof(float));
      if (s.ok()) {
        g->pinned_.push_back(v->data());
      } else {
        ZS_LOG(WARNING) << "gradient buffers stay pageable (slower copies): "
                        << s.message();
      }
    }
  }
  return g;
}

absl::Status GradShard::BeginStep() {
  std::fill(shard_.begin(), shard_.end(), 0.0f);
  units_finished_ = 0;
  for (const UnitGradPtr& g : resident_) {
    if (mem_ == nullptr) {
      std::fill(g->host.begin(), g->host.end(), 0.0f);
    } else {
      RETURN_IF_ERROR(mem_->Zero(g->data, g->size * sizeof(float)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GradShard::UnitGradPtr> GradShard::NewUnitGrad(size_t n) {
  auto g = std::make_unique<UnitGrad>();
  g->size = n;
  if (mem_ == nullptr) {
    g->host.assign(n, 0.0f);
    g->data = g->host.data();
  } else {
    ASSIGN_OR_RETURN(void* p, mem_->Allocate(n * sizeof(float)));
    g->data = static_cast<float*>(p);
    if (absl::Status s = mem_->Zero(p, n * sizeof(float)); !s.ok()) {
      mem_->Free(p);
      return s;
    }
  }
  // Atomic: the deleter below subtracts on the comm thread.
  const uint64_t live = __atomic_add_fetch(&live_bytes_, n * sizeof(float),
                                           __ATOMIC_RELAXED);
  peak_bytes_ = std::max(peak_bytes_, live);
  auto* self = this;
  return UnitGradPtr(g.release(), [self](UnitGrad* p) {
    // Runs on whichever thread drops the last reference (after the
    // reduce-scatter that read it).
    __atomic_fetch_sub(&self->live_bytes_, p->size * sizeof(float),
                       __ATOMIC_RELAXED);
    if (self->mem_ != nullptr) self->mem_->Free(p->data);
    delete p;
  });
}

absl::StatusOr<GradShard::UnitGradPtr> GradShard::Buffer(int unit,
                                                         bool accumulate) {
  if (options_.stage == 1) return resident_[unit];
  // The partition itself (Span) on the first micro-batch; later ones sum a
  // whole micro-batch's gradient first and then add it, in the same order as
  // N workers and the LocalTrainer do.
  if (direct_ && !accumulate) return UnitGradPtr();
  return NewUnitGrad(layout_->units()[unit].padded);
}

absl::Span<float> GradShard::Span(int unit, const UnitGradPtr& buffer) {
  if (buffer != nullptr) return absl::MakeSpan(buffer->data, buffer->size);
  // One worker under ZeRO-2/3: its part of the unit is the whole padded
  // unit, and the model accumulates straight into the FP32 partition.
  return absl::MakeSpan(shard_.data() + offset_[unit],
                        layout_->units()[unit].padded);
}

absl::Status GradShard::ReduceScatterFromModel(const UnitGrad& grad,
                                               absl::Span<float> out) {
  if (world_ == 1) {
    // The identity: the whole unit is this worker's part.
    return mem_->CopyFromModel(out.data(), grad.data, out.size() * sizeof(float));
  }
  if (rs_model_size_ < out.size()) {
    if (rs_model_ != nullptr) mem_->Free(rs_model_);
    rs_model_ = nullptr;
    rs_model_size_ = 0;
    ASSIGN_OR_RETURN(void* p, mem_->Allocate(out.size() * sizeof(float)));
    rs_model_ = static_cast<float*>(p);
    rs_model_size_ = out.size();
  }
  RETURN_IF_ERROR(group_->ReduceScatter(
      absl::MakeConstSpan(grad.data, grad.size),
      absl::MakeSpan(rs_model_, out.size()), 1.0f));
  RETURN_IF_ERROR(group_->Synchronize());
  return mem_->CopyFromModel(out.data(), rs_model_, out.size() * sizeof(float));
}

void GradShard::QueueReduceScatter(int unit, UnitGradPtr grad, bool accumulate,
                                   PushSession* push) {
  const FlatRange part = layout_->WorkerUnitRange(rank_, unit);
  float* shard = shard_.data() + offset_[unit];
  if (grad == nullptr) {
    // Direct: the gradient already sits in the partition; only the push
    // remains.
    if (push != nullptr) {
      queue_->Submit(
          [this, push, unit, part] { return FinishPart(push, unit, part); });
    }
    return;
  }
  // Model memory: the model's writes to `grad` may still run; the comm
  // thread waits for them.
  absl::StatusOr<std::shared_ptr<model::ModelFence>> fence;
  if (mem_ != nullptr) fence = mem_->Fence();
  queue_->Submit([this, unit, grad = std::move(grad), accumulate, push, part,
                  shard, fence = std::move(fence)]() mutable -> absl::Status {
    const size_t n = part.size();
    if (accumulate && scratch_.size() < n) scratch_.resize(n);
    absl::Span<float> out = accumulate ? absl::MakeSpan(scratch_.data(), n)
                                       : absl::MakeSpan(shard, n);
    absl::Status s;
    if (mem_ == nullptr) {
      s = group_->ReduceScatter(absl::MakeConstSpan(grad->data, grad->size),
                                out, 1.0f);
    } else {
      s = fence.ok() ? (*fence)->Wait() : fence.status();
      if (s.ok()) s = ReduceScatterFromModel(*grad, out);
    }
    grad.reset();
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("reduce-scatter of unit '",
                                       layout_->units()[unit].name,
                                       "': ", s.message()));
    }
    if (accumulate) {
      for (size_t i = 0; i < n; ++i) shard[i] += out[i];
    }
    if (push != nullptr) return FinishPart(push, unit, part);
    return absl::OkStatus();
  });
}

void GradShard::QueueResident(PushSession* push) {
  for (size_t u = 0; u < resident_.size(); ++u) {
    QueueReduceScatter(static_cast<int>(u), resident_[u],
                       /*accumulate=*/false, push);
  }
}

absl::Status GradShard::FinishPart(PushSession* push, int unit,
                                   FlatRange part) {
  const float* shard = shard_.data() + offset_[unit];
  // While the part is hot in cache and backward still runs: its share of
  // the global norm (summed over units in unit order after the drain, as
  // the LocalTrainer does).
  unit_sumsq_[unit] = GradSumOfSquares(absl::MakeConstSpan(shard, part.size()));
  ++units_finished_;
  if (push_bf16_.empty()) return push->Add(part, DType::kFp32, shard);
  uint16_t* wire = push_bf16_.data() + offset_[unit];
  FloatToBf16Array(shard, wire, part.size());
  return push->Add(part, DType::kBf16, wire);
}

absl::StatusOr<double> GradShard::SumOfSquares() const {
  if (units_finished_ != unit_sumsq_.size()) {
    return absl::InternalError(absl::StrCat(
        units_finished_, " of ", unit_sumsq_.size(),
        " units finished their gradient"));
  }
  double sumsq = 0;
  for (double s : unit_sumsq_) sumsq += s;
  return sumsq;
}

void GradShard::InjectOverflow() {
  if (shard_.empty()) return;
  shard_[0] = std::numeric_limits<float>::infinity();
  unit_sumsq_[0] = GradSumOfSquares(
      absl::MakeConstSpan(shard_.data(), layout_->WorkerUnitRange(rank_, 0).size()));
}

}  // namespace zeroshard
