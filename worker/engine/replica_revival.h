// With replicas (docs/DESIGN.md, "Replicas"): a server started in place of
// a dead one, or one back from a partition, takes its two copies back at a
// step boundary. A thread of rank 0's asks every 250 ms each server its
// client left whether it answers again (so a silent address never slows a
// step); before each step,
// for one that does, rank 0 checkpoints
// the step (every slot stands at it, nothing is being applied: the other
// ranks wait in the broadcast below), then Inits the server and restores
// its own slot's copy and the copy of the slot before it from that
// checkpoint. One broadcast from rank 0 then tells every rank which servers
// are back, so every rank writes both copies again from this step on.
//
//   ReplicaRevival revival(cfg, rank, client, group, &checkpoints);
//   for (; step < steps; ++step) {
//     RETURN_IF_ERROR(revival.BeforeStep(step, scaler));
//     ...
//   }
//
// Needs zeroshard.checkpoint.dir (the restore reads the checkpoint's files;
// on several hosts, a directory every server can read); without it rank 0
// says once that a replacement cannot take its copies back.
#ifndef ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_
#define ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_

#include <cstdint>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/shard_cluster.h"
#include "comm/collectives.h"
#include "common/config.h"
#include "common/loss_scaler.h"
#include "worker/engine/checkpoint_coordinator.h"

namespace zeroshard {

class ReplicaRevival {
 public:
  // Rank 0 with replicas starts the watching thread.
  ReplicaRevival(const TrainingConfig& config, int rank, ShardCluster* client,
                 WorkerGroup* group, CheckpointCoordinator* checkpoints);
  // Stops and joins the thread.
  ~ReplicaRevival();
  ReplicaRevival(const ReplicaRevival&) = delete;
  ReplicaRevival& operator=(const ReplicaRevival&) = delete;

  // Every rank, before step `step` (no-op without replicas).
  absl::Status BeforeStep(uint64_t step, const LossScalerState& scaler);

  // Servers revived so far (rank 0's count).
  int revived() const { return revived_; }

 private:
  // Rank 0: the servers revived before `step`, as "k,k,...".
  absl::StatusOr<std::string> ReviveFresh(uint64_t step,
                                          const LossScalerState& scaler);
  // The thread: every kLookEvery, which gone servers answer again.
  void Watch();

  const TrainingConfig& config_;
  const int rank_;
  ShardCluster* const client_;
  WorkerGroup* const group_;
  CheckpointCoordinator* const checkpoints_;
  bool said_no_dir_ = false;
  int revived_ = 0;

  absl::Mutex mu_;
  std::set<int> fresh_ ABSL_GUARDED_BY(mu_);  // gone, answering again
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_
