#include "server/step_log.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

namespace zeroshard {

void StepLog::Open(uint64_t from_step) {
  absl::MutexLock lock(&mu_);
  pushes_.clear();
  bytes_ = 0;
  overflowed_ = false;
  first_step_ = from_step;
  open_.store(true, std::memory_order_release);
}

void StepLog::Close() {
  absl::MutexLock lock(&mu_);
  open_.store(false, std::memory_order_release);
  pushes_.clear();
  bytes_ = 0;
  overflowed_ = false;
}

void StepLog::Record(uint64_t step, uint64_t attempt, const StepParams& params,
                     absl::Span<const GradPiece> pieces) {
  if (!is_open()) return;
  absl::MutexLock lock(&mu_);
  if (!open_.load(std::memory_order_relaxed) || overflowed_ ||
      step < first_step_) {
    return;
  }
  uint64_t n = 0;
  for (const GradPiece& p : pieces) n += p.range.size() * DTypeSize(p.dtype);
  if (bytes_ + n > max_bytes_) {
    // Kept whole or not at all: a log with a hole could not be replayed.
    overflowed_ = true;
    pushes_.clear();
    bytes_ = 0;
    return;
  }
  auto push = std::make_shared<LoggedPush>();
  push->step = step;
  push->attempt = attempt;
  push->params = params;
  push->data.resize(n);
  push->pieces.reserve(pieces.size());
  size_t at = 0;
  for (const GradPiece& p : pieces) {
    const size_t b = p.range.size() * DTypeSize(p.dtype);
    if (b > 0) std::memcpy(push->data.data() + at, p.data, b);
    push->pieces.push_back({p.range, p.dtype, push->data.data() + at});
    at += b;
  }
  bytes_ += n;
  pushes_.push_back(std::move(push));
}

absl::StatusOr<std::vector<std::shared_ptr<const LoggedPush>>> StepLog::Read(
    uint64_t from_step) {
  absl::MutexLock lock(&mu_);
  if (!open_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(
        "StepLog: no log is open on this copy (open one with action OPEN)");
  }
  if (overflowed_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "StepLog: the log of pushes since step ", first_step_,
        " outgrew its bound of ", max_bytes_,
        " bytes and was dropped; catch up from a newer checkpoint"));
  }
  if (from_step < first_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("StepLog: the log holds pushes from step ", first_step_,
                     " on; step ", from_step, " was dropped or never kept"));
  }
  while (!pushes_.empty() && pushes_.front()->step < from_step) {
    bytes_ -= pushes_.front()->data.size();
    pushes_.pop_front();
  }
  // A push of an earlier step recorded after a later one (independent
  // chunks) is dropped as well: it is before the reader's restore point.
  std::deque<std::shared_ptr<const LoggedPush>> kept;
  for (auto& p : pushes_) {
    if (p->step >= from_step) {
      kept.push_back(std::move(p));
    } else {
      bytes_ -= p->data.size();
    }
  }
  pushes_ = std::move(kept);
  first_step_ = from_step;
  return std::vector<std::shared_ptr<const LoggedPush>>(pushes_.begin(),
                                                        pushes_.end());
}

uint64_t StepLog::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace zeroshard
