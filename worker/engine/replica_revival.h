// With replicas (docs/DESIGN.md, "Replicas"): a server started in place of
// a dead one, or one back from a partition, takes its two copies back while
// training goes on. A thread of rank 0's asks every 250 ms each server its
// client left whether it answers again (so a silent address never slows a
// step). Before step s, for one that does, rank 0 starts its catch-up
// (client/replica_catch_ups.h): the other copies of its two slots keep the
// pushes they apply from s on, a checkpoint of s is written under
// zeroshard.checkpoint.dir/catch-up, and a thread restores the server's
// copies from it and replays the logged pushes while training goes on. At
// a later step boundary, once that thread is done, rank 0 replays the last
// pushes (every slot stands at the step then, nothing is being applied: the
// other ranks wait in the broadcast below), and one broadcast tells every
// rank which servers are back, so every rank writes both copies again from
// this step on.
//
//   ReplicaRevival revival(cfg, rank, client, group, &checkpoints);
//   for (; step < steps; ++step) {
//     RETURN_IF_ERROR(revival.BeforeStep(step, scaler));
//     ...
//   }
//
// Needs zeroshard.checkpoint.dir (the restore reads the checkpoint's files;
// on several hosts, a directory every server can read); without it rank 0
// says once that a replacement cannot take its copies back. A catch-up that
// fails (the replacement dies again, a log outgrows its bound) is said and
// started again when the server answers; after kCatchUpTries failures the
// server takes its copies back the way that cannot fall behind: a
// checkpoint and a restore at one step boundary, the other ranks waiting.
#ifndef ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_
#define ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/replica_catch_ups.h"
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
  // Rank 0: ends the catch-ups that are done and starts those of the
  // servers found answering; the servers back before `step`, as "k,k,...".
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
  std::unique_ptr<ReplicaCatchUps> catch_ups_;  // rank 0, with a directory

  absl::Mutex mu_;
  std::set<int> fresh_ ABSL_GUARDED_BY(mu_);  // gone, answering again
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_
