// Worker rank 0's part in coordinated checkpoints (docs/DESIGN.md,
// "Checkpoints"): before a checkpoint step s starts it arms every server at
// version s (no gradient of step s exists anywhere yet: every other rank
// waits for rank 0 in step s's first collective), then lets training go on
// while a background thread waits for the servers' shard files and commits
// the checkpoint with its MANIFEST.json, then prunes old ones.
//
//   CheckpointCoordinator ckpt(cfg, &layout, &*client);
//   for (; step < cfg.cluster.steps; ++step) {
//     RETURN_IF_ERROR(ckpt.BeforeStep(step, engine->loss_scaler().state()));
//     ... engine->Step(step) ...
//   }
//   RETURN_IF_ERROR(ckpt.Final(step, engine->loss_scaler().state()));
//
// At most one checkpoint is in flight: arming the next one first waits for
// the previous commit (so servers hold at most one snapshot each).
#ifndef ZEROSHARD_WORKER_ENGINE_CHECKPOINT_COORDINATOR_H_
#define ZEROSHARD_WORKER_ENGINE_CHECKPOINT_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/shard_cluster.h"
#include "common/config.h"
#include "common/layout.h"
#include "common/loss_scaler.h"

namespace zeroshard {

class CheckpointCoordinator {
 public:
  // No checkpoints unless config.cluster.checkpoint.dir is set. `resumed_at`
  // is the step the run started from: no checkpoint is taken there (it is
  // the one the run came from, or step 0).
  CheckpointCoordinator(const TrainingConfig& config, const FlatLayout* layout,
                        const ShardCluster* cluster, uint64_t resumed_at);
  ~CheckpointCoordinator();  // waits for a commit in flight

  bool enabled() const { return !dir_.empty(); }

  // Before step `step` runs, with the loss-scaler state at its start: arms
  // the servers when `step` is a checkpoint step (every_steps), after the
  // previous commit finished. Returns a failed earlier commit's error.
  absl::Status BeforeStep(uint64_t step, const LossScalerState& scaler);

  // After the last step: checkpoints `step` (unless it was just taken) and
  // waits for every commit.
  absl::Status Final(uint64_t step, const LossScalerState& scaler);

  // Checkpoints `step` now, between steps, and waits for its commit (one
  // already armed or committed at `step`, or the one the run resumed from,
  // is waited for, not taken again): what a replacement server restores
  // (worker/engine/replica_revival.h). FAILED_PRECONDITION without a
  // checkpoint directory.
  absl::Status CheckpointNow(uint64_t step, const LossScalerState& scaler);
  const std::string& dir() const { return dir_; }

  // Checkpoints committed so far.
  uint64_t committed() const;

 private:
  absl::Status Start(uint64_t step, const LossScalerState& scaler);
  absl::Status WaitPrevious();

  const TrainingConfig config_;
  const FlatLayout* const layout_;
  const ShardCluster* const cluster_;
  const std::string dir_;
  const uint64_t resumed_at_;
  int64_t last_armed_ = -1;
  std::unique_ptr<std::thread> commit_;

  mutable absl::Mutex mu_;
  absl::Status commit_status_ ABSL_GUARDED_BY(mu_);
  uint64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_CHECKPOINT_COORDINATOR_H_
