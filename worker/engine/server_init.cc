#include "worker/engine/server_init.h"

#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {

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
