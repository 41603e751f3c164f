// zeroshard-train's recovery after a process fails (--max_restarts): new
// workers on the same servers when the servers stand at a clean step (or a
// step every worker had prepared, finished from what the servers hold),
// otherwise every process again from the newest checkpoint.
//
//   ASSIGN_OR_RETURN(std::string what,
//                    Recover(cfg, o, attempt, interrupted, &plan, &cluster));
#ifndef ZEROSHARD_TOOLS_TRAIN_RECOVERY_H_
#define ZEROSHARD_TOOLS_TRAIN_RECOVERY_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/client_options.h"
#include "common/config.h"
#include "tools/train/train_cluster.h"
#include "tools/train/train_run.h"

namespace zeroshard {

// How the launcher reaches its servers: as admin, for the run.
absl::StatusOr<ShardClientOptions> LauncherClientOptions(
    const TrainClusterPlan& plan);

// Replaces what failed in `*cluster` for attempt `attempt`: the workers
// alone when the servers are alive and clean, otherwise every process,
// restoring the newest checkpoint (plan->resume_dir is set to it). Returns
// what it did, in words.
absl::StatusOr<std::string> Recover(const TrainingConfig& cfg,
                                    const TrainOptions& o, uint64_t attempt,
                                    const std::atomic<bool>* interrupted,
                                    TrainClusterPlan* plan,
                                    std::unique_ptr<TrainCluster>* cluster);

}  // namespace zeroshard

#endif  // ZEROSHARD_TOOLS_TRAIN_RECOVERY_H_
