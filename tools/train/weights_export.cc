#include "tools/train/weights_export.h"

#include <bit>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/shard_cluster.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "common/weights_index.h"
#include "model/arch.h"

namespace zeroshard {
absl::Status ExportWeights(const std::vector<std::string>& servers,
                           const FlatLayout& layout, int64_t version,
                           const std::string& dir, absl::Duration timeout,
                           WeightsFileFormat format,
                           ShardClientOptions options) {
  static_assert(std::endian::native == std::endian::little,
                "weights.f32 is little-endian; add a byte swap here");
  options.call_timeout = timeout;
  options.control_timeout = timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> client,
                   ShardCluster::Connect(servers, options, layout));
  // With replicas, a server the workers left (hung, then woken too late to
  // be restored) answers with an older step: read its slots' other copies.
  RETURN_IF_ERROR(client->LeaveStaleCopies());
  std::vector<float> weights(layout.total_elems());
  const FlatRange all{0, layout.total_elems()};
  absl::StatusOr<GatherResult> g =
      client->Gather({&all, 1}, DType::kFp32, version, weights.data(),
                     weights.size() * sizeof(float));
  if (!g.ok()) {
    return absl::Status(g.status().code(),
                        absl::StrCat("gathering the final weights: ",
                                     g.status().message()));
  }
  if (format == WeightsFileFormat::kSafetensors) {
    ASSIGN_OR_RETURN(const model::ModelArch* arch,
                     model::ArchOfManifest(layout.manifest()));
    RETURN_IF_ERROR(arch->WriteHfSafetensors(
        dir + "/weights.safetensors", layout, weights,
        {{"zeroshard_step", absl::StrCat(version)}}));
  }
  RETURN_IF_ERROR(WriteFileAtomically(
      dir + "/weights.f32",
      absl::string_view(reinterpret_cast<const char*>(weights.data()),
                        weights.size() * sizeof(float))));
  return WriteFileAtomically(dir + "/weights.json",
                             WeightsIndexJson(layout, version));
}

}  // namespace zeroshard
