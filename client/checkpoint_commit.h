// Commits a coordinated checkpoint (docs/DESIGN.md, "Checkpoints") once
// every server's shard file is written: <directory>/step-<s>/MANIFEST.json
// (docs/formats/checkpoint_manifest.md) names the files, the model and what
// the run needs to resume. Part of the client library's public API.
#ifndef ZEROSHARD_CLIENT_CHECKPOINT_COMMIT_H_
#define ZEROSHARD_CLIENT_CHECKPOINT_COMMIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/server_status.h"
#include "common/layout.h"
#include "common/loss_scaler.h"

namespace zeroshard {

// What the manifest records beyond the shard files.
struct CheckpointInfo {
  uint64_t step = 0;
  const FlatLayout* layout = nullptr;  // the writing run's
  LossScalerState loss_scaler;
  uint64_t config_fingerprint = 0;
  uint64_t data_position = 0;
  uint64_t schedule_total_steps = 0;  // the run's lr schedule's total_steps
};

// Writes <directory>/step-<s>/MANIFEST.json naming every server's file
// (checked against the layout's server ranges first), then keeps the newest
// `keep_last` checkpoints (0: all).
absl::Status CommitCheckpoint(const std::string& directory,
                              const std::vector<ShardFile>& files,
                              const CheckpointInfo& info, int keep_last);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_CHECKPOINT_COMMIT_H_
