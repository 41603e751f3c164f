// With replicas (docs/DESIGN.md, "Replicas"): a server started in place of
// a dead one takes its two copies back at a step boundary. Before each
// step, rank 0 asks (at most every 250 ms) each server its client left
// whether it answers now without state; for one that does, it checkpoints
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

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/shard_cluster.h"
#include "comm/collectives.h"
#include "common/config.h"
#include "common/loss_scaler.h"
#include "worker/engine/checkpoint_coordinator.h"

namespace zeroshard {

class ReplicaRevival {
 public:
  ReplicaRevival(const TrainingConfig& config, int rank, ShardCluster* client,
                 WorkerGroup* group, CheckpointCoordinator* checkpoints)
      : config_(config),
        rank_(rank),
        client_(client),
        group_(group),
        checkpoints_(checkpoints) {}

  // Every rank, before step `step` (no-op without replicas).
  absl::Status BeforeStep(uint64_t step, const LossScalerState& scaler);

  // Servers revived so far (rank 0's count).
  int revived() const { return revived_; }

 private:
  // Rank 0: the servers revived before `step`, as "k,k,...".
  absl::StatusOr<std::string> ReviveFresh(uint64_t step,
                                          const LossScalerState& scaler);

  const TrainingConfig& config_;
  const int rank_;
  ShardCluster* const client_;
  WorkerGroup* const group_;
  CheckpointCoordinator* const checkpoints_;
  absl::Time next_look_ = absl::InfinitePast();
  bool said_no_dir_ = false;
  int revived_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_
