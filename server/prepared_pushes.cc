#include "server/prepared_pushes.h"

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {

void PreparedPushes::DropBefore(uint64_t step, uint64_t attempt) {
  auto old = [&](const PreparedPush& p) {
    return p.attempt < attempt || (p.attempt == attempt && p.step < step);
  };
  for (const PreparedPush& p : prepared_) {
    if (old(p)) store_->AddPendingGradBytes(-p.pending_bytes);
  }
  prepared_.erase(std::remove_if(prepared_.begin(), prepared_.end(), old),
                  prepared_.end());
}

absl::Status PreparedPushes::Classify(uint64_t step,
                                      absl::Span<const GradPiece> pieces,
                                      uint64_t* at_step,
                                      uint64_t* applied) const {
  *at_step = 0;
  *applied = 0;
  size_t wrong = SIZE_MAX;
  ForEachChunkPart(*store_, pieces, [&](size_t c, uint64_t elems) {
    const uint64_t v = tracker_->version(c);
    if (v == step) {
      *at_step += elems;
    } else if (v == step + 1) {
      *applied += elems;
    } else {
      wrong = c;
      return false;
    }
    return true;
  });
  if (wrong == SIZE_MAX) return absl::OkStatus();
  const FlatRange chunk = store_->ChunkRange(wrong);
  const uint64_t v = tracker_->version(wrong);
  return absl::AbortedError(absl::StrCat(
      "prepare for step ", step, " is ", v > step ? "stale" : "ahead",
      ": chunk [", chunk.begin, ", ", chunk.end, ") is at version ", v,
      " (steps applied) and accepts step ", v, " only"));
}

absl::StatusOr<uint64_t> PreparedPushes::Prepare(PreparedPush push) {
  // Every check first; only an accepted prepare records its attempt.
  auto refuse = [&](absl::Status s) -> absl::StatusOr<uint64_t> {
    store_->AddPendingGradBytes(-push.pending_bytes);
    return s;
  };
  if (absl::Status s = tracker_->CheckAttempt(push.attempt); !s.ok()) {
    return refuse(s);
  }
  if (absl::Status s = tracker_->CheckParams(push.step, push.params);
      !s.ok()) {
    return refuse(s);
  }
  absl::MutexLock lock(&mu_);
  // Read under mu_: a commit that completes these chunks sweeps the
  // prepared pushes after it publishes their versions, so a push held here
  // is either seen as applied now or dropped by that sweep.
  uint64_t at_step = 0, applied = 0;
  if (absl::Status s = Classify(push.step, push.pieces, &at_step, &applied);
      !s.ok()) {
    return refuse(s);
  }
  for (const PreparedPush& p : prepared_) {
    if (p.step == push.step && p.attempt == push.attempt &&
        p.worker != push.worker &&
        (p.params.coefficient != push.params.coefficient ||
         p.params.skip != push.params.skip ||
         p.params.settings != push.params.settings)) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(
          "prepare for step ", push.step, " from worker ", push.worker,
          " has coefficient ", push.params.coefficient, " skip=",
          push.params.skip, " (", push.params.settings.size(),
          " group settings), but worker ", p.worker, " prepared coefficient ",
          p.params.coefficient, " skip=", p.params.skip, " (",
          p.params.settings.size(), ")",
          "; every push of one step must agree")));
    }
  }
  if (at_step == 0) {
    // Nothing of it can apply any more (or it is empty): acknowledged as a
    // duplicate and held by no one.
    store_->AddPendingGradBytes(-push.pending_bytes);
    return applied;
  }
  if (absl::Status s = tracker_->NoteAttempt(push.attempt); !s.ok()) {
    return refuse(s);
  }
  DropBefore(push.step, push.attempt);
  for (PreparedPush& p : prepared_) {
    if (p.step == push.step && p.attempt == push.attempt &&
        p.worker == push.worker) {
      // A retried stream of the same worker: the newer copy stands.
      store_->AddPendingGradBytes(-p.pending_bytes);
      p = std::move(push);
      return uint64_t{0};
    }
  }
  prepared_.push_back(std::move(push));
  return uint64_t{0};
}

void PreparedPushes::DropApplied() {
  absl::MutexLock lock(&mu_);
  auto applied = [&](const PreparedPush& p) {
    return ForEachChunkPart(*store_, p.pieces, [&](size_t c, uint64_t) {
      return tracker_->version(c) > p.step;
    });
  };
  for (auto it = prepared_.begin(); it != prepared_.end();) {
    if (applied(*it)) {
      store_->AddPendingGradBytes(-it->pending_bytes);
      it = prepared_.erase(it);
    } else {
      ++it;
    }
  }
}

void PreparedPushes::Clear() {
  absl::MutexLock lock(&mu_);
  for (const PreparedPush& p : prepared_) {
    store_->AddPendingGradBytes(-p.pending_bytes);
  }
  prepared_.clear();
}

PreparedPushes::Summary PreparedPushes::Summarize() const {
  absl::MutexLock lock(&mu_);
  Summary s;
  for (const PreparedPush& p : prepared_) {
    s.step = p.step;
    s.attempt = p.attempt;
    for (const GradPiece& g : p.pieces) s.elems += g.range.size();
  }
  return s;
}

absl::StatusOr<std::vector<PreparedPush>> PreparedPushes::Take(
    uint64_t step, uint64_t attempt) {
  // Every check before any change: a refused ApplyStep drops no prepared
  // push and records no attempt (the caller's claim records it).
  RETURN_IF_ERROR(tracker_->CheckAttempt(attempt));
  absl::MutexLock lock(&mu_);
  // Elements of chunks still at `step`, and how many of them the prepared
  // pushes hold (workers' partitions are disjoint, and one push per worker
  // is kept).
  uint64_t needed = 0, covered = 0;
  for (size_t c = 0; c < store_->num_chunks(); ++c) {
    if (tracker_->version(c) == step) needed += store_->ChunkRange(c).size();
  }
  const PreparedPush* first = nullptr;
  for (const PreparedPush& p : prepared_) {
    if (p.step != step || p.attempt != attempt) continue;
    if (first == nullptr) first = &p;
    if (p.params.coefficient != first->params.coefficient ||
        p.params.skip != first->params.skip ||
        p.params.settings != first->params.settings) {
      // Prepare refuses this; kept as the stated rule.
      return absl::InvalidArgumentError(absl::StrCat(
          "ApplyStep ", step, ": workers ", first->worker, " and ", p.worker,
          " prepared different coefficients or skip flags; nothing applied"));
    }
    ForEachChunkPart(*store_, p.pieces, [&](size_t c, uint64_t elems) {
      if (tracker_->version(c) == step) covered += elems;
      return true;
    });
  }
  if (needed == 0) {
    // No chunk at `step`: every one is past it (applied already), or none
    // has reached it (a step ahead of the servers).
    if (store_->num_chunks() > 0 && tracker_->version(0) < step) {
      return absl::AbortedError(absl::StrCat(
          "ApplyStep ", step, " is ahead: the chunks are at version ",
          tracker_->version(0)));
    }
    return std::vector<PreparedPush>();  // applied already
  }
  if (covered < needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ApplyStep ", step, " (attempt ", attempt, "): the prepared pushes "
        "hold ", covered, " of the ", needed, " elements still at version ",
        step, "; a worker has not prepared here"));
  }
  // The caller's claim must not fail once the pushes are taken.
  RETURN_IF_ERROR(tracker_->CheckParams(step, first->params));
  DropBefore(step, attempt);
  std::vector<PreparedPush> mine;
  for (auto it = prepared_.begin(); it != prepared_.end();) {
    if (it->step == step && it->attempt == attempt) {
      mine.push_back(std::move(*it));
      it = prepared_.erase(it);
    } else {
      ++it;
    }
  }
  return mine;
}

}  // namespace zeroshard
