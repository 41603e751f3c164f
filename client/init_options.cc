#include "client/init_options.h"

#include "client/shard_client.h"
#include "common/status_macros.h"
#include "wire/optimizer_difference.h"

namespace zeroshard {

InitOptions InitOptionsFor(const TrainingConfig& config) {
  InitOptions init;
  init.optimizer = config.optimizer;
  init.param_groups = config.param_groups;
  init.seed = config.cluster.seed;
  init.init_std = config.cluster.init_std;
  init.chunk_elems = config.cluster.chunk_elems;
  init.num_workers = static_cast<uint32_t>(config.cluster.workers);
  init.replicas = static_cast<uint32_t>(config.cluster.replicas);
  return init;
}

absl::StatusOr<std::string> OptimizerChangeSince(
    absl::string_view checkpoint_optimizer_json, const FlatLayout& layout,
    const InitOptions& options) {
  ASSIGN_OR_RETURN(v1::OptimizerConfig was,
                   OptimizerConfigFromJson(checkpoint_optimizer_json));
  ASSIGN_OR_RETURN(v1::OptimizerConfig now, InitOptimizer(layout, options));
  return OptimizerDifference(std::move(was), std::move(now));
}

}  // namespace zeroshard
