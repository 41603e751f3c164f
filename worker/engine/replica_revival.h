// With replicas (docs/DESIGN.md, "Replicas"): a server started in place of
// a dead one, or one back from a partition, takes its two copies back while
// training goes on. A thread of rank 0's asks every 250 ms each server its
// client left whether it answers again (so a silent address never slows a
// step). Before step s, for one that does, rank 0 has the other copies of
// its two slots keep the pushes they apply from s on (the step log) and
// arms a checkpoint of s, and returns to training. A catch-up thread waits
// for that checkpoint, Inits the server and restores its copies from it,
// then replays the logged pushes into them, round after round, until they
// stand within a step of the others. At the next step boundary rank 0
// replays the last pushes (every slot stands at the step then, nothing is
// being applied: the other ranks wait in the broadcast below), drops the
// logs, and one broadcast tells every rank which servers are back, so
// every rank writes both copies again from this step on.
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

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
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
  // One server catching up (rank 0). The thread writes `status` and
  // `version` before it sets `done`; rank 0 reads them after.
  struct CatchUp {
    int k = 0;
    uint64_t from = 0;  // the checkpoint's step, where its logs begin
    absl::Time started;
    std::thread thread;
    std::atomic<bool> done{false};
    absl::Status status;
    uint64_t version = 0;  // the copies' version after the thread's replays
    int rounds = 0;
  };

  // Rank 0: finishes the catch-ups that are ready and starts those of the
  // servers found answering; the servers back before `step`, as "k,k,...".
  absl::StatusOr<std::string> ReviveFresh(uint64_t step,
                                          const LossScalerState& scaler);
  // Opens the logs, arms the checkpoint of `step`, starts the thread.
  absl::Status StartCatchUp(int k, uint64_t step,
                            const LossScalerState& scaler);
  // The catch-up thread's work.
  absl::Status RunCatchUp(CatchUp* c);
  // Between steps, for a catch-up whose thread is done: the last replay,
  // then the server is back. False (said) when the catch-up failed.
  absl::StatusOr<bool> FinishCatchUp(CatchUp& c, uint64_t step);
  // A catch-up failed: said, its logs dropped, counted.
  void GiveUp(const CatchUp& c, const absl::Status& why);
  // The thread: every kLookEvery, which gone servers answer again.
  void Watch();

  const TrainingConfig& config_;
  const int rank_;
  ShardCluster* const client_;
  WorkerGroup* const group_;
  CheckpointCoordinator* const checkpoints_;
  bool said_no_dir_ = false;
  int revived_ = 0;
  std::map<int, std::unique_ptr<CatchUp>> catching_;  // by server
  std::map<int, int> failures_;                        // catch-ups given up
  std::atomic<uint64_t> step_{0};  // the step rank 0 is about to run
  std::atomic<bool> stop_catch_up_{false};

  absl::Mutex mu_;
  std::set<int> fresh_ ABSL_GUARDED_BY(mu_);  // gone, answering again
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_REPLICA_REVIVAL_H_
