#include "server/gather_reactor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/proto_convert.h"
#include "common/status_macros.h"
#include "wire/gather_codec.h"
#include "wire/grpc_status.h"

namespace zeroshard {

absl::StatusOr<GatherPlan> PlanGather(const ModelShard& state,
                                      const v1::GatherRequest& request,
                                      const SharedRegions* regions) {
  GatherPlan plan;
  if (request.dtype() != v1::DTYPE_FP32 && request.dtype() != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gather: dtype ", v1::DType_Name(request.dtype()),
                     " is not served; want DTYPE_FP32 or DTYPE_BF16"));
  }
  ASSIGN_OR_RETURN(plan.dtype, FromProto(request.dtype()));
  for (int i = 0; i < request.ranges_size(); ++i) {
    const v1::FlatRange& r = request.ranges(i);
    RETURN_IF_ERROR(state.CheckOwned(r.offset(), r.length(),
                                     absl::StrCat("Gather: range ", i)));
    plan.ranges.push_back({r.offset(), r.offset() + r.length()});
  }
  if (absl::Status s = CheckDisjoint(plan.ranges); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Gather: ", s.message()));
  }
  uint32_t max_bytes = request.max_message_bytes();
  if (max_bytes == 0 || max_bytes > kMaxGatherMessageBytes) {
    max_bytes = kMaxGatherMessageBytes;
  }
  plan.elems_per_message =
      std::max<uint64_t>(1, max_bytes / DTypeSize(plan.dtype));
  plan.min_version = request.min_version();
  if (request.region() != 0) {
    if (regions == nullptr) {
      return absl::FailedPreconditionError(
          "Gather: into shared memory, but this server serves none");
    }
    uint64_t bytes = 0;
    for (const FlatRange& r : plan.ranges) {
      bytes += r.size() * DTypeSize(plan.dtype);
    }
    ASSIGN_OR_RETURN(SharedRegions::Resolved region,
                     regions->Resolve(request.region(),
                                      request.region_offset(), bytes,
                                      "Gather"));
    plan.region = std::move(region.memory);
    plan.region_at = region.at;
    // One message per server chunk: it carries no data.
    plan.elems_per_message = state.owned().size() + 1;
  }
  return plan;
}

GatherReactor::GatherReactor(std::shared_ptr<ModelShard> state,
                             GatherPlan plan, RpcCounters* counters)
    : state_(std::move(state)), plan_(std::move(plan)), counters_(counters) {
  {
    absl::MutexLock lock(&mu_);
    if (!plan_.ranges.empty()) pos_ = plan_.ranges[0].begin;
  }
  Next();
}

void GatherReactor::Next() {
  enum class Action { kNone, kWrite, kFinish } action = Action::kNone;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (cancelled_) {
      finished_ = true;
      result_ = absl::CancelledError(
          "Gather cancelled (by the client or its deadline)");
      action = Action::kFinish;
    } else {
      while (range_index_ < plan_.ranges.size() &&
             pos_ >= plan_.ranges[range_index_].end) {
        if (++range_index_ < plan_.ranges.size()) {
          pos_ = plan_.ranges[range_index_].begin;
        }
      }
      if (range_index_ == plan_.ranges.size()) {
        finished_ = true;
        action = Action::kFinish;
      } else {
        const size_t c = state_->ChunkOf(pos_);
        if (plan_.min_version >= 0) {
          Ref();  // held by the waiter callback
          const uint64_t id = state_->WaitForVersion(
              c, static_cast<uint64_t>(plan_.min_version),
              [this] { OnChunkReady(); });
          if (id != 0) {
            waiter_id_ = id;
            return;
          }
          Unref();  // never the last: gRPC holds one until OnDone
        }
        // The version is read before the copy: every step below it is
        // complete in the data read under the chunk's lock.
        const uint64_t version = state_->version(c);
        const FlatRange& range = plan_.ranges[range_index_];
        const uint64_t end =
            std::min({range.end, state_->ChunkRange(c).end,
                      pos_ + plan_.elems_per_message});
        const FlatRange piece{pos_, end};
        const size_t bytes = piece.size() * DTypeSize(plan_.dtype);
        absl::Status read;
        if (plan_.region != nullptr) {
          read = state_->Read(piece, plan_.dtype, plan_.region_at + written_);
          written_ += bytes;
          buffer_ = EncodeGatherRegionChunk(piece.begin, plan_.dtype, version,
                                            piece.size());
        } else {
          buffer_ = EncodeGatherChunk(
              piece.begin, plan_.dtype, version, bytes, [&](uint8_t* dst) {
                read = state_->Read(piece, plan_.dtype, dst);
              });
        }
        if (!read.ok()) {
          // Only the device placement can fail here (its state is lost).
          buffer_.Clear();
          finished_ = true;
          result_ = read;
          action = Action::kFinish;
        } else {
          counters_->AddBytesOut(bytes);
          pos_ = end;
          writing_ = true;
          action = Action::kWrite;
        }
      }
    }
  }
  // gRPC calls are made without holding mu_: a reaction may run inline.
  if (action == Action::kWrite) {
    StartWrite(&buffer_);
  } else if (action == Action::kFinish) {
    absl::Status result;
    {
      absl::MutexLock lock(&mu_);
      result = result_;
      counters_->RecordResult(result_);  // before the client sees it
      recorded_ = true;
    }
    FinishWith(result);
  }
}

void GatherReactor::OnChunkReady() {
  {
    absl::MutexLock lock(&mu_);
    waiter_id_ = 0;
  }
  Next();
  Unref();
}

void GatherReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
  }
  Next();
}

void GatherReactor::OnCancel() {
  bool unref = false;
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (waiter_id_ != 0 && state_->CancelWait(waiter_id_)) {
      waiter_id_ = 0;
      unref = true;
    }
    // Otherwise a write or a waiter callback in flight finishes the call.
    if (!finished_ && !writing_ && waiter_id_ == 0) {
      finished_ = true;
      finish = true;
      result_ = absl::CancelledError(absl::StrCat(
          "Gather cancelled (by the client or its deadline) while waiting "
          "for version ", plan_.min_version));
      counters_->RecordResult(result_);
      recorded_ = true;
    }
  }
  if (finish) FinishWith(absl::CancelledError("cancelled"));
  if (unref) Unref();
}

void GatherReactor::OnDone() {
  {
    absl::MutexLock lock(&mu_);
    if (!recorded_) counters_->RecordResult(result_);
  }
  Unref();
}

}  // namespace zeroshard
