#include "client/push_session.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/piece_plan.h"
#include "client/server_push_stream.h"
#include "client/shard_channels.h"
#include "common/status_macros.h"

namespace zeroshard {
absl::Status ValidateStepCommit(const StepCommit& c) {
  if (!std::isfinite(c.coefficient) || c.coefficient < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push coefficient ", c.coefficient, " must be finite and >= 0"));
  }
  for (size_t i = 0; i < c.settings.size(); ++i) {
    RETURN_IF_ERROR(ValidateStepSetting(c.settings[i], i));
  }
  return absl::OkStatus();
}

PushSession::PushSession(const ShardChannels* channels,
                         const FlatLayout* layout, uint64_t step,
                         uint32_t worker, std::optional<StepCommit> known)
    : channels_(channels),
      layout_(layout),
      step_(step),
      worker_(worker),
      known_(known) {
  streams_.resize(channels->size());
}

absl::Status PushSession::SlotError(
    int slot,
    const std::vector<std::unique_ptr<ServerPushStream>>& copies) const {
  // A stream still going counts as a copy that answers; nothing is marked
  // down before the replies (Wait).
  std::vector<ShardChannels::CopyResult> results;
  for (const auto& s : copies) results.push_back({s->server(), s->error()});
  return channels_->SettleCopies(slot, results, /*mark_down=*/false);
}

PushSession::~PushSession() {
  if (!finished_) {
    Abort();
  } else if (commit_sent_) {
    // A sent commit cannot be taken back: its replies are awaited.
    Wait().IgnoreError();
  }
}

absl::Status PushSession::FirstStreamError() const {
  for (size_t k = 0; k < streams_.size(); ++k) {
    if (streams_[k].empty()) continue;
    if (absl::Status e = SlotError(static_cast<int>(k), streams_[k]); !e.ok()) {
      return e;
    }
  }
  return absl::OkStatus();
}

absl::Status PushSession::Add(const FlatRange& range, DType dtype,
                              const void* data) {
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push session for step ", step_, " is already committed or aborted"));
  }
  if (absl::Status e = FirstStreamError(); !e.ok()) return e;
  if (data == nullptr) {
    return absl::InvalidArgumentError("PushSession::Add: data is null");
  }
  auto planned = PlanPieces(*layout_, range, dtype,
                            channels_->options().max_message_bytes);
  if (!planned.ok()) return planned.status();
  // Overlap with an earlier range of this session?
  auto it = std::lower_bound(
      added_.begin(), added_.end(), range,
      [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  const bool overlaps_next = it != added_.end() && it->begin < range.end;
  const bool overlaps_prev = it != added_.begin() && (it - 1)->end > range.begin;
  if (overlaps_next || overlaps_prev) {
    const FlatRange& other = overlaps_next ? *it : *(it - 1);
    return absl::InvalidArgumentError(absl::StrCat(
        "push range [", range.begin, ", ", range.end, ") overlaps [",
        other.begin, ", ", other.end, ") pushed earlier for step ", step_));
  }
  added_.insert(it, range);

  std::vector<std::vector<QueuedPiece>> by_server(streams_.size());
  const auto* base = static_cast<const uint8_t*>(data);
  for (const PlannedPiece& p : *planned) {
    by_server[p.server].push_back(
        {p.range.begin, dtype, base + p.byte_offset,
         p.range.size() * DTypeSize(dtype)});
  }
  for (size_t k = 0; k < by_server.size(); ++k) {
    if (by_server[k].empty()) continue;
    const int slot = static_cast<int>(k);
    if (streams_[k].empty()) {
      // Every live copy of the slot (one without replicas).
      const std::vector<int> holders = channels_->LiveHolders(slot);
      if (holders.empty()) {
        return absl::UnavailableError(absl::StrCat(
            "every copy of slot ", slot, " is gone; the run can only go on "
            "from its newest checkpoint"));
      }
      for (int server : holders) {
        streams_[k].push_back(std::make_unique<ServerPushStream>(
            channels_, slot, server, step_, worker_, known_));
      }
    }
    for (auto& s : streams_[k]) s->Enqueue(by_server[k]);
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> PushSession::Commit(const StepCommit& commit) {
  RETURN_IF_ERROR(SendCommit(commit));
  return Wait();
}

absl::Status PushSession::SendCommit(const StepCommit& commit) {
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push session for step ", step_, " is already committed or aborted"));
  }
  if (absl::Status s = ValidateStepCommit(commit); !s.ok()) return s;
  if (known_.has_value() && (known_->coefficient != commit.coefficient ||
                             known_->skip != commit.skip ||
                             known_->settings != commit.settings)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "commit (", commit.coefficient, ", skip=", commit.skip,
        ") differs from the coefficient given up front (", known_->coefficient,
        ", skip=", known_->skip, ") for step ", step_));
  }
  finished_ = true;
  commit_sent_ = true;
  for (auto& copies : streams_) {
    for (auto& s : copies) s->Close(commit);
  }
  return absl::OkStatus();
}

absl::StatusOr<PushResult> PushSession::Wait() {
  if (!commit_sent_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push session for step ", step_, ": Wait without a sent commit"));
  }
  commit_sent_ = false;
  PushResult result;
  absl::Status first_error;
  for (size_t k = 0; k < streams_.size(); ++k) {
    if (streams_[k].empty()) continue;
    // A slot's sums are its first answering copy's; the copies' outcome is
    // ShardChannels::OnEveryCopy's rule (a lost copy beside one that
    // answered is marked down).
    std::optional<v1::PushGradResponse> answered;
    std::vector<ShardChannels::CopyResult> results;
    for (auto& s : streams_[k]) {
      auto r = s->Wait();
      if (r.ok() && !answered.has_value()) answered = *r;
      results.push_back({s->server(), r.status()});
    }
    const absl::Status slot_error =
        channels_->SettleCopies(static_cast<int>(k), results);
    if (!slot_error.ok()) {
      if (first_error.ok()) first_error = slot_error;
      continue;
    }
    result.applied_elems += answered->applied_elems();
    result.duplicate_elems += answered->duplicate_elems();
    result.chunks_completed += answered->chunks_completed();
    ++result.streams;
  }
  if (!first_error.ok()) return first_error;
  return result;
}

void PushSession::Abort() {
  finished_ = true;
  for (auto& copies : streams_) {
    for (auto& s : copies) s->Cancel();
  }
  for (auto& copies : streams_) {
    for (auto& s : copies) s->Wait().IgnoreError();
  }
}

}  // namespace zeroshard
