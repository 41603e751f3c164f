#include "server/step_tracker.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

std::string RangeText(FlatRange r) {
  return absl::StrCat("[", r.begin, ", ", r.end, ")");
}

}  // namespace

StepTracker::StepTracker(FlatRange owned, uint64_t chunk_elems)
    : owned_(owned),
      chunk_elems_(chunk_elems),
      num_chunks_((owned.size() + chunk_elems - 1) / chunk_elems),
      versions_(std::make_unique<std::atomic<uint64_t>[]>(num_chunks_)),
      chunks_(num_chunks_) {
  for (size_t c = 0; c < num_chunks_; ++c) versions_[c].store(0);
}

FlatRange StepTracker::ChunkRange(size_t c) const {
  const uint64_t begin = owned_.begin + c * chunk_elems_;
  return {begin, std::min(owned_.end, begin + chunk_elems_)};
}

uint64_t StepTracker::ClaimedWithin(const ChunkState& chunk,
                                    FlatRange r) const {
  uint64_t n = 0;
  // The first claimed interval that may reach into r starts before r.end.
  auto it = chunk.claimed.upper_bound(r.begin);
  if (it != chunk.claimed.begin()) --it;
  for (; it != chunk.claimed.end() && it->first < r.end; ++it) {
    n += Intersect({it->first, it->second}, r).size();
  }
  return n;
}

void StepTracker::AddClaimed(ChunkState& chunk, FlatRange r) {
  uint64_t begin = r.begin, end = r.end;
  // Merge with a neighbour ending at begin and one starting at end.
  auto next = chunk.claimed.find(end);
  if (next != chunk.claimed.end()) {
    end = next->second;
    chunk.claimed.erase(next);
  }
  auto it = chunk.claimed.lower_bound(begin);
  if (it != chunk.claimed.begin()) {
    auto prev = std::prev(it);
    if (prev->second == begin) {
      begin = prev->first;
      chunk.claimed.erase(prev);
    }
  }
  chunk.claimed[begin] = end;
}

absl::Status StepTracker::CheckParams(uint64_t step,
                                      const StepParams& params) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckParamsLocked(step, params);
}

absl::Status StepTracker::CheckParamsLocked(uint64_t step,
                                            const StepParams& params) const {
  auto it = params_.find(step);
  if (it == params_.end()) return absl::OkStatus();
  if (it->second.coefficient != params.coefficient ||
      it->second.skip != params.skip) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step, " was pushed with coefficient ", params.coefficient,
        " skip=", params.skip, ", but an earlier push of the same step used "
        "coefficient ", it->second.coefficient, " skip=", it->second.skip,
        "; every push of one step must agree"));
  }
  if (it->second.settings != params.settings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step, " was pushed with other group settings (",
        params.settings.size(), " groups) than an earlier push of the same "
        "step (", it->second.settings.size(), "); every push of one step "
        "must agree"));
  }
  return absl::OkStatus();
}

absl::Status StepTracker::NoteAttempt(uint64_t attempt) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckAttemptLocked(attempt));
  attempt_ = attempt;
  return absl::OkStatus();
}

absl::Status StepTracker::CheckAttempt(uint64_t attempt) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckAttemptLocked(attempt);
}

absl::Status StepTracker::CheckAttemptLocked(uint64_t attempt) const {
  if (attempt < attempt_) {
    return absl::AbortedError(absl::StrCat(
        "push of attempt ", attempt, " refused: the workers were restarted "
        "(attempt ", attempt_, " has pushed since); a replaced worker's "
        "pieces are never applied"));
  }
  return absl::OkStatus();
}

uint64_t StepTracker::attempt() const {
  absl::ReaderMutexLock lock(&mu_);
  return attempt_;
}

absl::StatusOr<std::vector<size_t>> StepTracker::ArmCapture(uint64_t step) {
  absl::MutexLock lock(&mu_);
  std::vector<size_t> at_step;
  for (size_t c = 0; c < num_chunks_; ++c) {
    const uint64_t v = versions_[c].load(std::memory_order_relaxed);
    if (v > step || (v == step && !chunks_[c].claimed.empty())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot snapshot version ", step, ": chunk ",
          RangeText(ChunkRange(c)), " is at version ", v,
          v == step ? " with part of that step applied" : "",
          "; choose a later step"));
    }
    if (v == step) at_step.push_back(c);
  }
  ++capture_steps_[step];
  return at_step;
}

void StepTracker::DisarmCapture(uint64_t step) {
  absl::MutexLock lock(&mu_);
  auto it = capture_steps_.find(step);
  if (it != capture_steps_.end() && --it->second == 0) capture_steps_.erase(it);
}

uint64_t StepTracker::adam_t(size_t chunk) const {
  absl::ReaderMutexLock lock(&mu_);
  return chunks_[chunk].adam_t;
}

absl::Status StepTracker::SetAdamSteps(uint64_t adam_t) {
  absl::MutexLock lock(&mu_);
  for (size_t c = 0; c < num_chunks_; ++c) {
    if (!chunks_[c].claimed.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk ", RangeText(ChunkRange(c)), " has part of step ",
          versions_[c].load(), " applied: the Adam step count is set between "
          "steps"));
    }
  }
  for (size_t c = 0; c < num_chunks_; ++c) chunks_[c].adam_t = adam_t;
  return absl::OkStatus();
}

absl::Status StepTracker::Reset(uint64_t version,
                                absl::Span<const uint64_t> adam_t) {
  std::vector<std::function<void()>> wake;
  {
    absl::MutexLock lock(&mu_);
    if (adam_t.size() != num_chunks_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Reset: ", adam_t.size(), " Adam step counts for ", num_chunks_,
          " chunks"));
    }
    if (!capture_steps_.empty()) {
      return absl::FailedPreconditionError(
          "a checkpoint snapshot is in progress; restore after it is written");
    }
    for (size_t c = 0; c < num_chunks_; ++c) {
      if (!chunks_[c].claimed.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "chunk ", RangeText(ChunkRange(c)), " has part of step ",
            versions_[c].load(), " applied; stop the workers and let the "
            "step finish (or restart the server) before restoring"));
      }
    }
    params_.clear();
    for (size_t c = 0; c < num_chunks_; ++c) {
      chunks_[c].adam_t = adam_t[c];
      chunks_[c].applied = 0;
      versions_[c].store(version, std::memory_order_release);
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.version <= version) {
        wake.push_back(std::move(it->second.wake));
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& f : wake) f();
  return absl::OkStatus();
}

absl::StatusOr<StepClaim> StepTracker::Claim(
    uint64_t step, const StepParams& params,
    absl::Span<const FlatRange> ranges, uint64_t attempt) {
  StepClaim claim;
  claim.step = step;
  claim.skip = params.skip;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckAttemptLocked(attempt); !s.ok()) return s;
  if (absl::Status s = CheckParamsLocked(step, params); !s.ok()) return s;
  claim.capture = capture_steps_.contains(step);
  // Pass 1: classify every segment; nothing changes until all pass.
  for (size_t p = 0; p < ranges.size(); ++p) {
    uint64_t pos = ranges[p].begin;
    while (pos < ranges[p].end) {
      const size_t c = (pos - owned_.begin) / chunk_elems_;
      const FlatRange chunk_range = ChunkRange(c);
      const FlatRange seg{pos, std::min(ranges[p].end, chunk_range.end)};
      pos = seg.end;
      const uint64_t v = versions_[c].load(std::memory_order_relaxed);
      if (v == step + 1) {
        claim.duplicate_elems += seg.size();
        continue;
      }
      if (v > step + 1) {
        return absl::AbortedError(absl::StrCat(
            "push for step ", step, " is stale: chunk ",
            RangeText(chunk_range), " is at version ", v,
            " (steps applied); retry with the current step"));
      }
      if (v < step) {
        return absl::AbortedError(absl::StrCat(
            "push for step ", step, " is ahead: chunk ",
            RangeText(chunk_range), " is at version ", v,
            " (steps applied) and accepts step ", v, " only"));
      }
      const uint64_t done = ClaimedWithin(chunks_[c], seg);
      if (done == seg.size()) {
        claim.duplicate_elems += seg.size();
      } else if (done == 0) {
        claim.segments.push_back({p, seg, c, chunks_[c].adam_t + 1});
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "range ", RangeText(seg), " of step ", step,
            " partially overlaps elements already applied for that step (",
            done, " of ", seg.size(), "); a retry must repeat whole ranges"));
      }
    }
  }
  // Pass 2: record (the attempt too: the claim is accepted).
  attempt_ = attempt;
  params_.emplace(step, params);
  for (const ClaimedSegment& seg : claim.segments) {
    AddClaimed(chunks_[seg.chunk], seg.range);
  }
  return claim;
}

uint64_t StepTracker::Complete(const StepClaim& claim) {
  std::vector<std::function<void()>> wake;
  uint64_t completed = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const ClaimedSegment& seg : claim.segments) {
      ChunkState& chunk = chunks_[seg.chunk];
      chunk.applied += seg.range.size();
      if (chunk.applied < ChunkRange(seg.chunk).size()) continue;
      chunk.applied = 0;
      chunk.claimed.clear();
      if (!claim.skip) ++chunk.adam_t;
      const uint64_t v = claim.step + 1;
      versions_[seg.chunk].store(v, std::memory_order_release);
      ++completed;
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->second.chunk == seg.chunk && it->second.version <= v) {
          wake.push_back(std::move(it->second.wake));
          waiters_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    if (completed > 0) {
      // Forget the parameters of steps that no chunk can see again.
      uint64_t min_version = UINT64_MAX;
      for (size_t c = 0; c < num_chunks_; ++c) {
        min_version = std::min(min_version, versions_[c].load());
      }
      while (!params_.empty() && params_.begin()->first + 1 < min_version) {
        params_.erase(params_.begin());
      }
    }
  }
  for (auto& f : wake) f();
  return completed;
}

StepTracker::Summary StepTracker::Summarize() const {
  absl::ReaderMutexLock lock(&mu_);
  Summary s;
  for (size_t c = 0; c < num_chunks_; ++c) {
    const uint64_t v = versions_[c].load();
    if (c == 0 || v < s.min_version) s.min_version = v;
    if (c == 0 || v > s.max_version) s.max_version = v;
    if (c == 0 || chunks_[c].adam_t < s.min_adam_step) {
      s.min_adam_step = chunks_[c].adam_t;
    }
    if (!chunks_[c].claimed.empty()) ++s.partial_chunks;
  }
  return s;
}

uint64_t StepTracker::WaitForVersion(size_t chunk, uint64_t v,
                                     std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  if (versions_[chunk].load() >= v) return 0;
  const uint64_t id = next_waiter_id_++;
  waiters_.emplace(id, Waiter{chunk, v, std::move(wake)});
  return id;
}

bool StepTracker::CancelWait(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(id) > 0;
}

}  // namespace zeroshard
