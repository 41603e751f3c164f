#include "worker/engine/server_init.h"

#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {

InitOptions InitOptionsFor(const TrainingConfig& config) {
  InitOptions init;
  init.optimizer = config.optimizer;
  init.param_groups = config.param_groups;
  init.seed = config.cluster.seed;
  init.init_std = config.cluster.init_std;
  init.chunk_elems = config.cluster.chunk_elems;
  init.num_workers = static_cast<uint32_t>(config.cluster.workers);
  return init;
}

absl::Status InitializeServers(const TrainingConfig& config, int rank,
                               ShardCluster* client, WorkerGroup* group) {
  if (rank == 0) {
    RETURN_IF_ERROR(client->Init(InitOptionsFor(config)).status());
    ZS_LOG(INFO) << "parameter groups: "
                 << DescribeParamGroups(config.param_groups,
                                        config.optimizer.weight_decay);
  }
  return group->Barrier();
}

}  // namespace zeroshard
