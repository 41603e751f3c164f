#include "server/snapshot_arming.h"

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<std::shared_ptr<ShardSnapshot>> SnapshotArming::Arm(
    uint64_t step, const std::string& directory,
    v1::ShardCheckpointHeader header) {
  std::shared_ptr<ShardSnapshot> snap;
  std::vector<size_t> at_step;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& s : snapshots_) {
      if (s->step() == step && s->directory() == directory) return s;
    }
    // Counted before the tracker arms, so that a chunk completing to `step`
    // meanwhile looks for the snapshot (and waits for mu_).
    ++armed_;
    absl::StatusOr<std::vector<size_t>> armed = tracker_->ArmCapture(step);
    if (!armed.ok()) {
      --armed_;
      return armed.status();
    }
    at_step = *std::move(armed);
    // A file of a host store streams from the store (no copy of the
    // shard); a device store's chunks are copied to the host first.
    snap = std::make_shared<ShardSnapshot>(
        step, directory, std::move(header), store_->num_chunks(), nullptr,
        store_->placement() == Placement::kDevice ? nullptr : store_);
    if (snap->streaming()) {
      snap->OnChunksRead([this, step] { Disarm(step); });
    }
    if (!snap->allocated()) {
      Disarm(step);
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate the ", SnapshotBytes(),
          " bytes a snapshot of this shard needs (master and ",
          store_->rule().slots().size(), " state slots)"));
    }
    // Keep the armed ones and the two newest finished ones.
    std::vector<std::shared_ptr<ShardSnapshot>> kept;
    int finished = 0;
    for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it) {
      if ((*it)->result().has_value() && ++finished > 2) continue;
      kept.insert(kept.begin(), *it);
    }
    snapshots_ = std::move(kept);
    snapshots_.push_back(snap);
  }
  // A server that owns nothing (more servers than 64-element blocks) has no
  // chunk whose copy would finish the snapshot: it is complete at once.
  if (store_->num_chunks() == 0) FinishIfLast(*snap, true);
  // Chunks at `step` with nothing claimed: no claim of `step` has reached
  // them, and any that does copies first, so a copy made meanwhile is clean
  // too. They are copied on the snapshot's own thread, so that arming
  // returns at once (the usual case: the servers applied step-1 before the
  // coordinator arms step, so every chunk is here).
  if (!at_step.empty() && snap->streaming()) {
    // Only marked: the writer reads them from the store.
    for (size_t c : at_step) {
      FinishIfLast(*snap, snap->Capture(*store_, c, tracker_->adam_t(c),
                                        /*before_update=*/false));
    }
  } else if (!at_step.empty()) {
    ShardSnapshot* raw = snap.get();
    raw->RunInBackground([this, raw, chunks = std::move(at_step)] {
      for (size_t c : chunks) {
        if (raw->stopping()) return;
        FinishIfLast(*raw, raw->Capture(*store_, c, tracker_->adam_t(c)));
      }
    });
  }
  return snap;
}

std::shared_ptr<ShardSnapshot> SnapshotArming::Find(
    uint64_t step, const std::string& directory) const {
  absl::MutexLock lock(&mu_);
  for (const auto& s : snapshots_) {
    if (s->step() == step && s->directory() == directory) return s;
  }
  return nullptr;
}

bool SnapshotArming::InProgress() const {
  absl::MutexLock lock(&mu_);
  for (const auto& s : snapshots_) {
    if (!s->result().has_value()) return true;
  }
  return false;
}

SnapshotArming::~SnapshotArming() {
  std::vector<std::shared_ptr<ShardSnapshot>> snapshots;
  {
    absl::MutexLock lock(&mu_);
    snapshots = snapshots_;
  }
  // Their threads read the store, which goes after this.
  for (const auto& s : snapshots) s->Abandon();
}

void SnapshotArming::Disarm(uint64_t step) {
  tracker_->DisarmCapture(step);
  --armed_;
}

void SnapshotArming::FinishIfLast(ShardSnapshot& snap, bool last) {
  if (!last) return;
  // A streaming snapshot stays armed until its writer has read every
  // chunk (OnChunksRead).
  if (!snap.streaming()) Disarm(snap.step());
  snap.Finish();
}

void SnapshotArming::ForgetFinishedInMemory() {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ShardSnapshot>> kept;
  for (auto& s : snapshots_) {
    if (s->directory().empty() && s->result().has_value()) continue;
    kept.push_back(std::move(s));
  }
  snapshots_ = std::move(kept);
}

std::vector<std::shared_ptr<ShardSnapshot>> SnapshotArming::ArmedAt(
    uint64_t step) const {
  std::vector<std::shared_ptr<ShardSnapshot>> armed;
  absl::MutexLock lock(&mu_);
  for (const auto& s : snapshots_) {
    if (s->step() == step && !s->result().has_value()) armed.push_back(s);
  }
  return armed;
}

void SnapshotArming::CaptureCompleted(const StepClaim& claim) {
  const uint64_t v = claim.step + 1;
  const std::vector<std::shared_ptr<ShardSnapshot>> armed = ArmedAt(v);
  if (armed.empty()) return;
  size_t prev = SIZE_MAX;
  for (const ClaimedSegment& seg : claim.segments) {
    if (seg.chunk == prev || tracker_->version(seg.chunk) != v) continue;
    prev = seg.chunk;
    for (const auto& snap : armed) {
      FinishIfLast(*snap, snap->Capture(*store_, seg.chunk,
                                        tracker_->adam_t(seg.chunk),
                                        /*before_update=*/false));
    }
  }
}

void SnapshotArming::CaptureClaimed(const StepClaim& claim) {
  const std::vector<std::shared_ptr<ShardSnapshot>> armed =
      ArmedAt(claim.step);
  size_t prev = SIZE_MAX;
  for (const ClaimedSegment& seg : claim.segments) {
    if (seg.chunk == prev) continue;  // segments of a chunk are often adjacent
    prev = seg.chunk;
    for (const auto& snap : armed) {
      // seg.adam_t is the count this update will use: t at version s, + 1.
      FinishIfLast(*snap, snap->Capture(*store_, seg.chunk, seg.adam_t - 1));
    }
  }
}

uint64_t SnapshotArming::SnapshotBytes() const {
  const uint64_t n = store_->owned().size();
  uint64_t bytes = n * sizeof(float);
  for (const StateSlot& slot : store_->rule().slots()) {
    bytes += SlotBytes(slot.format, n);
  }
  return bytes;
}

}  // namespace zeroshard
