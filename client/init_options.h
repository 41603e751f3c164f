// What ShardCluster::Init sends to every server (client/shard_cluster.h).
#ifndef ZEROSHARD_CLIENT_INIT_OPTIONS_H_
#define ZEROSHARD_CLIENT_INIT_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "common/layout.h"
#include "common/optimizer_config.h"
#include "common/param_groups.h"

namespace zeroshard {

// What Init sends to every server (each also gets its server_index and S).
struct InitOptions {
  OptimizerConfig optimizer;
  // Weight decay and lr scale per tensor class, sent as per-range settings
  // (common/param_groups.h); default Hugging Face's, Single() for torch's one
  // group.
  ParamGroups param_groups;
  // Non-empty: these groups (disjoint ranges inside [0, total), each with
  // its weight decay and lr scale) in place of param_groups' classes, for a
  // caller whose groups are not classes (torch's param-group dicts).
  std::vector<ResolvedGroup> explicit_groups;
  // Seeded init (common/init_values.h); nullopt: all zeros.
  std::optional<uint64_t> seed = 0;
  // Std of the seeded normal init; 0: the server default 0.02.
  double init_std = 0;
  // Elements per version chunk; 0: server default. Multiple of 64.
  uint64_t chunk_elems = 0;
  // The number of workers of the run (0: the manifest's partition_count);
  // the run id comes from ShardClientOptions.run_id.
  uint32_t num_workers = 0;
  // InitRequest.replace: a new model for the same run replaces the state.
  bool replace = false;
  // InitRequest.replicas: copies of each slot (1 or 2).
  uint32_t replicas = 1;
};

// The Init a training config asks for: its optimizer and parameter groups,
// seeded weights, chunk size, worker count.
InitOptions InitOptionsFor(const TrainingConfig& config);

// What differs between the optimizer a checkpoint recorded
// (CheckpointManifest::optimizer_json) and the one Init(options) would send
// over `layout`, in the configuration file's words ("optimizer.params.lr:
// 0.001 -> 0.002"); "" when nothing the optimizer state depends on does
// (the check the servers' restore makes, so a launcher can make it before
// anything starts). DATA_LOSS when the recorded form does not parse;
// INVALID_ARGUMENT as Init for options it would refuse.
absl::StatusOr<std::string> OptimizerChangeSince(
    absl::string_view checkpoint_optimizer_json, const FlatLayout& layout,
    const InitOptions& options);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_INIT_OPTIONS_H_
