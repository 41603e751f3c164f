#include "worker/engine/init_from.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "model/hf_gpt2.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/arch.h"

namespace zeroshard {
namespace {

// True when every server is initialised with all chunks at version 0;
// false when any has trained.
absl::StatusOr<bool> ServersFresh(const ShardCluster& cluster) {
  std::vector<absl::StatusOr<ServerStatus>> all = cluster.InspectAll();
  bool fresh = true;
  for (int k = 0; k < cluster.num_servers(); ++k) {
    if (!all[k].ok()) return all[k].status();
    if (!all[k]->initialized) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--init_from: server ", k, " (", cluster.address(k),
          ") is not initialised"));
    }
    if (all[k]->max_version > 0) {
      ZS_LOG(INFO) << "server " << k << " (" << cluster.address(k)
                   << ") has chunks at version " << all[k]->max_version;
      fresh = false;
    }
  }
  return fresh;
}

absl::Status LoadAndSet(const std::string& path, const TrainingConfig& config,
                        ShardCluster* client) {
  const FlatLayout& layout = client->layout();
  ASSIGN_OR_RETURN(const bool fresh, ServersFresh(*client));
  if (!fresh) {
    ZS_LOG(INFO) << "--init_from=" << path
                 << " not applied: the servers have trained past version 0 "
                    "(a restart or a resumed run keeps their weights)";
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const model::ModelArch* arch,
                   model::ArchOfManifest(layout.manifest()));
  ASSIGN_OR_RETURN(const std::vector<float> flat,
                   arch->ReadHfSafetensors(path, layout));
  RETURN_IF_ERROR(client->SetMasterWeights(flat));
  ZS_LOG(INFO) << "--init_from: set " << layout.param_elems()
               << " weights on " << client->num_servers()
               << " servers from " << path;
  return absl::OkStatus();
}

}  // namespace

absl::Status InitWeightsFromFile(const std::string& path,
                                 const TrainingConfig& config, int rank,
                                 ShardCluster* client, WorkerGroup* group) {
  if (rank == 0) RETURN_IF_ERROR(LoadAndSet(path, config, client));
  return group->Barrier();
}

}  // namespace zeroshard
