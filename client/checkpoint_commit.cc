#include "client/checkpoint_commit.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_manifest.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::Status CommitCheckpoint(const std::string& directory,
                              const std::vector<ShardFile>& files,
                              const CheckpointInfo& info, int keep_last) {
  const FlatLayout& layout = *info.layout;
  if (files.size() != layout.num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint of step ", info.step, ": ", files.size(),
        " shard files for ", layout.num_servers(), " servers"));
  }
  CheckpointManifest m;
  m.step = info.step;
  m.num_servers = layout.num_servers();
  m.total_elems = layout.total_elems();
  m.model_fingerprint = ModelFingerprint(layout.manifest());
  m.config_fingerprint = info.config_fingerprint;
  m.model = layout.manifest();
  m.loss_scaler = info.loss_scaler;
  m.data_position = info.data_position;
  m.schedule_total_steps = info.schedule_total_steps;
  m.optimizer_json = files.empty() ? "" : files[0].optimizer_json;
  for (uint32_t k = 0; k < files.size(); ++k) {
    const ShardFile& f = files[k];
    const FlatRange want = layout.ServerRange(k);
    const FlatRange got = f.owned;
    if (!f.done || f.step != info.step || !(got == want)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", info.step, ": server ", k,
          " reported step ", f.step, " range [", got.begin, ", ", got.end,
          ") done=", f.done, "; expected range [", want.begin, ", ",
          want.end, ")"));
    }
    CheckpointShardEntry e;
    e.server_index = k;
    e.owned = got;
    e.file = std::filesystem::path(f.path).filename().string();
    e.checksum = f.checksum;
    e.bytes = f.bytes;
    m.shards.push_back(std::move(e));
  }
  RETURN_IF_ERROR(WriteCheckpointManifest(directory, m));
  if (keep_last > 0) RETURN_IF_ERROR(PruneCheckpoints(directory, keep_last));
  return absl::OkStatus();
}

}  // namespace zeroshard
