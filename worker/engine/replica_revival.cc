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
// Catch-ups of one server that failed before it takes its copies back at
// one step boundary instead.
constexpr int kCatchUpTries = 3;

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
    if (checkpoints_->enabled()) {
      catch_ups_ = std::make_unique<ReplicaCatchUps>(
          client_, InitOptionsFor(config_), checkpoints_->dir() + "/catch-up",
          absl::Seconds(config_.cluster.step_timeout_s) * 4);
    }
    watcher_ = std::thread([this] { Watch(); });
  }
}

ReplicaRevival::~ReplicaRevival() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  catch_ups_.reset();
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

absl::StatusOr<std::string> ReplicaRevival::ReviveFresh(
    uint64_t step, const LossScalerState& scaler) {
  std::string back;
  if (catch_ups_ != nullptr) {
    for (int k : catch_ups_->Finish(step).back) {
      ++revived_;
      absl::StrAppend(&back, back.empty() ? "" : ",", k);
    }
  }
  std::set<int> fresh;
  {
    absl::MutexLock lock(&mu_);
    fresh.swap(fresh_);
  }
  for (int k : fresh) {
    if (!client_->ServerGone(k)) continue;
    if (catch_ups_ == nullptr) {
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
    if (catch_ups_->Busy(k)) continue;
    // Looked at again now: the thread's answer may be 250 ms old.
    absl::StatusOr<bool> still = client_->AnswersAgain(k, kLookTimeout);
    if (!still.ok() || !*still) continue;
    if (catch_ups_->Failures(k) < kCatchUpTries) {
      catch_ups_->Start(k, step).IgnoreError();  // said and counted
      continue;
    }
    // Catching up failed too often: at this boundary, the others waiting.
    ZS_LOG(WARNING) << "server " << k << " (" << client_->address(k)
                    << ") failed to catch up " << kCatchUpTries
                    << " times: it takes its copies back at this step "
                       "boundary, the other ranks waiting";
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(checkpoints_->CheckpointNow(step, scaler));
    RETURN_IF_ERROR(client_->ReviveServer(k, InitOptionsFor(config_),
                                          checkpoints_->dir(), step));
    catch_ups_->ForgetFailures(k);
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
  if (back.empty()) return absl::OkStatus();
  for (absl::string_view s : absl::StrSplit(back, ',', absl::SkipEmpty())) {
    int k = -1;
    if (!absl::SimpleAtoi(s, &k) || k < 0 || k >= client_->num_servers()) {
      return absl::InternalError(
          absl::StrCat("rank 0 named server '", s, "' as back"));
    }
    if (rank_ != 0) client_->MarkServerBack(k);
  }
  // A server left lost its shared-memory region, and the one back is a new
  // process: each rank opens its region there again.
  if (config_.cluster.shared_memory) {
    std::string why;
    ASSIGN_OR_RETURN(const int attached,
                     client_->AttachSharedMemory(
                         client_->layout().WorkerRanges(rank_), &why));
    ZS_LOG(INFO) << "server " << back << " back: " << attached << " of "
                 << client_->num_servers()
                 << " servers through shared memory again"
                 << (why.empty() ? "" : absl::StrCat(" (", why, ")"));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
