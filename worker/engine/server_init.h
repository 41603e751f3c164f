// The prelude to training, shared by zeroshard-worker and the tests that run
// workers as threads: rank 0 initialises the shard servers from the config
// (Init is idempotent, so a restarted run finds them as they are) and every
// rank waits at a barrier until that is done.
#ifndef ZEROSHARD_WORKER_ENGINE_SERVER_INIT_H_
#define ZEROSHARD_WORKER_ENGINE_SERVER_INIT_H_

#include "absl/status/status.h"
#include "client/shard_cluster.h"
#include "common/config.h"
#include "comm/collectives.h"

namespace zeroshard {

// Rank 0 calls ShardCluster::Init(InitOptionsFor(config)); then all ranks meet
// at a barrier. Every rank returns rank 0's error if Init failed there (the
// others then fail at the barrier, which rank 0 never reaches).
absl::Status InitializeServers(const TrainingConfig& config, int rank,
                               ShardCluster* client, WorkerGroup* group);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_SERVER_INIT_H_
