#include "client/replica_catch_ups.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/checkpoint_commit.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// Replay rounds of one catch-up's thread; the checkpoints kept in the
// catch-up folder.
constexpr int kRounds = 64;
constexpr int kKeepCheckpoints = 2;

}  // namespace

ReplicaCatchUps::ReplicaCatchUps(ShardCluster* cluster, InitOptions init,
                                 std::string directory, absl::Duration timeout)
    : cluster_(cluster),
      init_(std::move(init)),
      directory_(std::move(directory)),
      timeout_(timeout) {}

ReplicaCatchUps::~ReplicaCatchUps() {
  stop_.store(true);
  for (auto& [k, r] : running_) {
    r->thread.join();
    cluster_->CloseStepLogs(k);
  }
}

int ReplicaCatchUps::Failures(int k) const {
  auto it = failures_.find(k);
  return it == failures_.end() ? 0 : it->second;
}

void ReplicaCatchUps::Fail(int k, uint64_t from, const absl::Status& why) {
  cluster_->CloseStepLogs(k);
  ++failures_[k];
  ZS_LOG(WARNING) << "server " << k << " (" << cluster_->address(k)
                  << ") could not catch up from the checkpoint of step " << from
                  << " (" << why << ")";
}

absl::Status ReplicaCatchUps::Start(int k, uint64_t step) {
  step_.store(step);
  absl::Status s = cluster_->OpenStepLogs(k, step);
  if (s.ok()) s = cluster_->ArmCheckpoint(step, directory_);
  if (!s.ok()) {
    Fail(k, step, s);
    return s;
  }
  auto r = std::make_unique<Run>();
  r->k = k;
  r->from = step;
  r->started = absl::Now();
  Run* raw = r.get();
  r->thread = std::thread([this, raw] {
    raw->status = RunThread(raw);
    raw->done.store(true, std::memory_order_release);
  });
  ZS_LOG(INFO) << "server " << k << " (" << cluster_->address(k)
               << ") answers again: it catches up from a checkpoint of step "
               << step << " while training goes on";
  running_.emplace(k, std::move(r));
  return absl::OkStatus();
}

absl::Status ReplicaCatchUps::RunThread(Run* r) {
  ASSIGN_OR_RETURN(std::vector<ShardFile> files,
                   cluster_->WaitCheckpoint(r->from, directory_, timeout_));
  CheckpointInfo info;
  info.step = r->from;
  info.layout = &cluster_->layout();
  RETURN_IF_ERROR(CommitCheckpoint(directory_, files, info, kKeepCheckpoints));
  if (stop_.load()) return absl::CancelledError("stopped");
  RETURN_IF_ERROR(cluster_->RestoreServer(r->k, init_, directory_, r->from));
  r->version = r->from;
  // Each round replays what the other copies applied during the one
  // before, so the rounds shrink while the replay outpaces training; the
  // step boundary replays what is left.
  for (int round = 0; round < kRounds; ++round) {
    if (stop_.load()) return absl::CancelledError("stopped");
    ASSIGN_OR_RETURN(r->version, cluster_->ReplayStepLogs(r->k));
    ++r->rounds;
    if (r->version + 1 >= step_.load()) break;
  }
  return absl::OkStatus();
}

ReplicaCatchUps::Ended ReplicaCatchUps::Finish(uint64_t step) {
  step_.store(step);
  Ended ended;
  for (auto it = running_.begin(); it != running_.end();) {
    Run& r = *it->second;
    if (!r.done.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    r.thread.join();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<uint64_t> v = r.status.ok()
                                     ? cluster_->ReplayStepLogs(r.k)
                                     : absl::StatusOr<uint64_t>(r.status);
    if (v.ok() && *v != step) {
      v = absl::DataLossError(absl::StrCat("its copies stand at step ", *v,
                                           " after the last replay, not ",
                                           step));
    }
    if (!v.ok()) {
      Fail(r.k, r.from, v.status());
      ended.failed.push_back(r.k);
    } else {
      cluster_->CloseStepLogs(r.k);
      cluster_->MarkServerBack(r.k);
      failures_.erase(r.k);
      ended.back.push_back(r.k);
      ZS_LOG(INFO) << "server " << r.k << " (" << cluster_->address(r.k)
                   << ") took its copies back at step " << step << ", "
                   << absl::FormatDuration(absl::Now() - r.started)
                   << " after it answered: the checkpoint of step " << r.from
                   << ", then " << (r.version - r.from) << " steps replayed in "
                   << r.rounds
                   << " rounds while training went on, and the last "
                   << (step - r.version) << " in "
                   << absl::FormatDuration(absl::Now() - t0)
                   << " between steps";
    }
    it = running_.erase(it);
  }
  return ended;
}

}  // namespace zeroshard
