#include "worker/engine/checkpoint_coordinator.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {

namespace {

// Whether a server gone in `now` was not gone in `at_arm` (both sorted).
bool LostSince(const std::vector<int>& at_arm, const std::vector<int>& now) {
  return !std::includes(at_arm.begin(), at_arm.end(), now.begin(), now.end());
}

}  // namespace

CheckpointCoordinator::CheckpointCoordinator(const TrainingConfig& config,
                                             const FlatLayout* layout,
                                             const ShardCluster* cluster,
                                             uint64_t resumed_at)
    : config_(config),
      layout_(layout),
      cluster_(cluster),
      dir_(config.cluster.checkpoint.dir.empty()
               ? ""
               : std::filesystem::absolute(config.cluster.checkpoint.dir)
                     .string()),
      resumed_at_(resumed_at) {}

CheckpointCoordinator::~CheckpointCoordinator() { WaitPrevious().IgnoreError(); }

absl::Status CheckpointCoordinator::WaitPrevious() {
  if (commit_ != nullptr) {
    commit_->join();
    commit_.reset();
  }
  absl::MutexLock lock(&mu_);
  return commit_status_;
}

absl::Status CheckpointCoordinator::BeforeStep(uint64_t step,
                                               const LossScalerState& scaler) {
  if (!enabled()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(commit_status_);
  }
  const uint64_t every = config_.cluster.checkpoint.every_steps;
  if (every == 0 || step % every != 0 || step == resumed_at_) {
    return absl::OkStatus();
  }
  return Start(step, scaler);
}

absl::Status CheckpointCoordinator::Final(uint64_t step,
                                          const LossScalerState& scaler) {
  if (!enabled()) return absl::OkStatus();
  if (static_cast<int64_t>(step) != last_armed_ && step != resumed_at_) {
    RETURN_IF_ERROR(Start(step, scaler));
  }
  return WaitPrevious();
}

absl::Status CheckpointCoordinator::CheckpointNow(
    uint64_t step, const LossScalerState& scaler) {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        "no checkpoint directory (zeroshard.checkpoint.dir)");
  }
  const bool on_disk = step == resumed_at_ && step > 0;
  if (static_cast<int64_t>(step) != last_armed_ && !on_disk) {
    RETURN_IF_ERROR(Start(step, scaler));
  }
  return WaitPrevious();
}

uint64_t CheckpointCoordinator::committed() const {
  absl::MutexLock lock(&mu_);
  return committed_;
}

absl::Status CheckpointCoordinator::Start(uint64_t step,
                                          const LossScalerState& scaler) {
  RETURN_IF_ERROR(WaitPrevious());
  RETURN_IF_ERROR(cluster_->ArmCheckpoint(step, dir_));
  last_armed_ = static_cast<int64_t>(step);
  CheckpointInfo info;
  info.step = step;
  info.layout = layout_;
  info.loss_scaler = scaler;
  info.config_fingerprint = ConfigFingerprint(config_);
  info.data_position = step;
  info.schedule_total_steps = config_.optimizer.total_steps;
  const absl::Duration timeout =
      absl::Seconds(config_.cluster.step_timeout_s) * 4;
  // With replicas, the servers left before the files are awaited: a copy
  // lost meanwhile leaves its slot's file unwritten (the other copy was not
  // asked to write it), and the checkpoint is given up, not the run.
  // A server taken back meanwhile does not hide one lost: the servers gone
  // now are compared with those gone at arming, one by one.
  const std::vector<int> gone_at_arm = cluster_->GoneServers();
  commit_ = std::make_unique<std::thread>([this, info, timeout, gone_at_arm] {
    const absl::Time t0 = absl::Now();
    absl::Status s = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(auto files,
                       cluster_->WaitCheckpoint(info.step, dir_, timeout));
      RETURN_IF_ERROR(CommitCheckpoint(dir_, files, info,
                                       config_.cluster.checkpoint.keep_last));
      uint64_t bytes = 0;
      double copy = 0;
      for (const auto& f : files) {
        bytes += f.bytes;
        copy = std::max(copy, f.copy_seconds);
      }
      ZS_LOG(INFO) << "checkpoint of step " << info.step << " committed in "
                   << dir_ << ": " << bytes << " bytes, "
                   << absl::ToDoubleSeconds(absl::Now() - t0)
                   << " s after arming (copy " << copy << " s per server)";
      return absl::OkStatus();
    }();
    if (!s.ok() && cluster_->options().replicas > 1 &&
        LostSince(gone_at_arm, cluster_->GoneServers())) {
      ZS_LOG(WARNING) << "checkpoint of step " << info.step
                      << " given up: a server was lost while it was written ("
                      << s << "); the next one is taken as planned";
      return;
    }
    absl::MutexLock lock(&mu_);
    if (s.ok()) {
      ++committed_;
    } else {
      commit_status_ = absl::Status(
          s.code(), absl::StrCat("checkpoint of step ", info.step,
                                 " failed: ", s.message()));
    }
  });
  return absl::OkStatus();
}

}  // namespace zeroshard
