#include "worker/engine/replica_revival.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/init_options.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// How often rank 0's thread looks at the servers it left, and how long one
// look waits for an answer.
constexpr absl::Duration kLookEvery = absl::Milliseconds(250);
constexpr absl::Duration kLookTimeout = absl::Milliseconds(500);
// Catch-ups of one server given up before it takes its copies back at one
// step boundary instead; replay rounds of one catch-up's thread.
constexpr int kCatchUpTries = 3;
constexpr int kCatchUpRounds = 64;

}  // namespace

ReplicaRevival::ReplicaRevival(const TrainingConfig& config, int rank,
                               ShardCluster* client, WorkerGroup* group,
                               CheckpointCoordinator* checkpoints)
    : config_(config),
      rank_(rank),
      client_(client),
      group_(group),
      checkpoints_(checkpoints) {
  if (rank_ == 0 && config_.cluster.replicas > 1) {
    watcher_ = std::thread([this] { Watch(); });
  }
}

ReplicaRevival::~ReplicaRevival() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  stop_catch_up_.store(true);
  for (auto& [k, c] : catching_) {
    c->thread.join();
    client_->CloseStepLogs(k);
  }
}

void ReplicaRevival::Watch() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), kLookEvery);
    if (stop_) break;
    const std::vector<int> gone = client_->GoneServers();
    mu_.Unlock();
    std::set<int> fresh;
    for (int k : gone) {
      absl::StatusOr<bool> f = client_->AnswersAgain(k, kLookTimeout);
      if (f.ok() && *f) fresh.insert(k);
    }
    mu_.Lock();
    fresh_ = std::move(fresh);
  }
}

void ReplicaRevival::GiveUp(const CatchUp& c, const absl::Status& why) {
  client_->CloseStepLogs(c.k);
  const int n = ++failures_[c.k];
  ZS_LOG(WARNING) << "server " << c.k << " (" << client_->address(c.k)
                  << ") could not catch up from the checkpoint of step "
                  << c.from << " (" << why << "); "
                  << (n < kCatchUpTries
                          ? "it starts again once it answers"
                          : "next time it takes its copies back at one step "
                            "boundary, the other ranks waiting");
}

absl::Status ReplicaRevival::RunCatchUp(CatchUp* c) {
  RETURN_IF_ERROR(checkpoints_->AwaitCommit(
      c->from, absl::Seconds(config_.cluster.step_timeout_s) * 4,
      stop_catch_up_));
  if (stop_catch_up_.load()) return absl::CancelledError("stopped");
  RETURN_IF_ERROR(client_->RestoreServer(c->k, InitOptionsFor(config_),
                                         checkpoints_->dir(), c->from));
  c->version = c->from;
  // Each round replays what the other copies applied during the one
  // before, so the rounds shrink while the replay outpaces training; the
  // step boundary replays what is left.
  for (int round = 0; round < kCatchUpRounds; ++round) {
    if (stop_catch_up_.load()) return absl::CancelledError("stopped");
    ASSIGN_OR_RETURN(c->version, client_->ReplayStepLogs(c->k));
    ++c->rounds;
    if (c->version + 1 >= step_.load()) break;
  }
  return absl::OkStatus();
}

absl::Status ReplicaRevival::StartCatchUp(int k, uint64_t step,
                                          const LossScalerState& scaler) {
  RETURN_IF_ERROR(client_->OpenStepLogs(k, step));
  if (absl::Status s = checkpoints_->ArmNow(step, scaler); !s.ok()) {
    client_->CloseStepLogs(k);
    return s;
  }
  auto c = std::make_unique<CatchUp>();
  c->k = k;
  c->from = step;
  c->started = absl::Now();
  CatchUp* raw = c.get();
  c->thread = std::thread([this, raw] {
    raw->status = RunCatchUp(raw);
    raw->done.store(true, std::memory_order_release);
  });
  ZS_LOG(INFO) << "server " << k << " (" << client_->address(k)
               << ") answers again: it catches up from the checkpoint of step "
               << step << " while training goes on";
  catching_.emplace(k, std::move(c));
  return absl::OkStatus();
}

absl::StatusOr<bool> ReplicaRevival::FinishCatchUp(CatchUp& c,
                                                   uint64_t step) {
  c.thread.join();
  if (!c.status.ok()) {
    GiveUp(c, c.status);
    return false;
  }
  const absl::Time t0 = absl::Now();
  absl::StatusOr<uint64_t> v = client_->ReplayStepLogs(c.k);
  if (v.ok() && *v != step) {
    v = absl::DataLossError(absl::StrCat(
        "its copies stand at step ", *v, " after the last replay, not ", step));
  }
  if (!v.ok()) {
    GiveUp(c, v.status());
    return false;
  }
  client_->CloseStepLogs(c.k);
  client_->MarkServerBack(c.k);
  failures_.erase(c.k);
  ++revived_;
  ZS_LOG(INFO) << "server " << c.k << " (" << client_->address(c.k)
               << ") took its copies back at step " << step << ", "
               << absl::FormatDuration(absl::Now() - c.started)
               << " after it answered: the checkpoint of step " << c.from
               << ", then the pushes of steps " << c.from << " to "
               << c.version << " replayed in " << c.rounds
               << " rounds while training went on, and of the last "
               << (step - c.version) << " in "
               << absl::FormatDuration(absl::Now() - t0) << " between steps";
  return true;
}

absl::StatusOr<std::string> ReplicaRevival::ReviveFresh(
    uint64_t step, const LossScalerState& scaler) {
  step_.store(step);
  std::string back;
  for (auto it = catching_.begin(); it != catching_.end();) {
    CatchUp& c = *it->second;
    if (!c.done.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    ASSIGN_OR_RETURN(const bool ok, FinishCatchUp(c, step));
    if (ok) absl::StrAppend(&back, back.empty() ? "" : ",", c.k);
    it = catching_.erase(it);
  }
  std::set<int> fresh;
  {
    absl::MutexLock lock(&mu_);
    fresh.swap(fresh_);
  }
  for (int k : fresh) {
    if (!client_->ServerGone(k) || catching_.count(k) > 0) continue;
    if (!checkpoints_->enabled()) {
      if (!said_no_dir_) {
        ZS_LOG(WARNING) << "server " << k << " (" << client_->address(k)
                        << ") answers again, but it can only take "
                           "its copies back from a checkpoint: set "
                           "zeroshard.checkpoint.dir; its slots stay on one "
                           "copy";
        said_no_dir_ = true;
      }
      continue;
    }
    // Looked at again now: the thread's answer may be 250 ms old.
    absl::StatusOr<bool> still = client_->AnswersAgain(k, kLookTimeout);
    if (!still.ok() || !*still) continue;
    if (failures_[k] < kCatchUpTries) {
      if (absl::Status s = StartCatchUp(k, step, scaler); !s.ok()) {
        GiveUp(CatchUp{.k = k, .from = step}, s);
      }
      continue;
    }
    // Catching up failed too often: at this boundary, the others waiting.
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(checkpoints_->CheckpointNow(step, scaler));
    RETURN_IF_ERROR(client_->ReviveServer(k, InitOptionsFor(config_),
                                          checkpoints_->dir(), step));
    failures_.erase(k);
    ++revived_;
    ZS_LOG(INFO) << "server " << k << " (" << client_->address(k)
                 << ") took its copies back at step " << step << " in "
                 << absl::FormatDuration(absl::Now() - t0)
                 << " (the checkpoint of step " << step << ", then restore)";
    absl::StrAppend(&back, back.empty() ? "" : ",", k);
  }
  return back;
}

absl::Status ReplicaRevival::BeforeStep(uint64_t step,
                                        const LossScalerState& scaler) {
  if (config_.cluster.replicas < 2) return absl::OkStatus();
  std::string back;
  if (rank_ == 0) {
    ASSIGN_OR_RETURN(back, ReviveFresh(step, scaler));
  }
  // Every rank waits here until rank 0 has restored what it revived.
  RETURN_IF_ERROR(group_->Broadcast(&back, 0));
  if (rank_ == 0) return absl::OkStatus();
  for (absl::string_view s : absl::StrSplit(back, ',', absl::SkipEmpty())) {
    int k = -1;
    if (!absl::SimpleAtoi(s, &k) || k < 0 || k >= client_->num_servers()) {
      return absl::InternalError(
          absl::StrCat("rank 0 named server '", s, "' as back"));
    }
    client_->MarkServerBack(k);
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
