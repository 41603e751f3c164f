// The client side of coordinated checkpoints (docs/DESIGN.md,
// "Checkpoints"): arm every server at one step, wait for their shard files,
// commit the checkpoint with its MANIFEST.json; restore every server from
// one.
//
//   RETURN_IF_ERROR(ArmCheckpoint(channels, 30, "/ckpt", token));
//   ... step 30 runs; each server copies its chunks as they reach 30 ...
//   ASSIGN_OR_RETURN(auto files, WaitCheckpoint(channels, 30, "/ckpt", token,
//                                               absl::Minutes(5)));
//   RETURN_IF_ERROR(CommitCheckpoint("/ckpt", files, info));
//
// Every call goes to all servers in parallel; an error names the server.
#ifndef ZEROSHARD_CLIENT_CHECKPOINT_CLIENT_H_
#define ZEROSHARD_CLIENT_CHECKPOINT_CLIENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/shard_channels.h"
#include "common/checkpoint_manifest.h"
#include "common/layout.h"
#include "common/loss_scaler.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// One Checkpoint call to server k (UNAVAILABLE retried): arm (wait false,
// under the control deadline) or wait for the file (under `timeout`).
absl::Status CheckpointOn(const ShardChannels& channels, int k, uint64_t step,
                          const std::string& directory, bool wait,
                          absl::Duration timeout,
                          v1::CheckpointResponse* response);

// Arms a snapshot of version `step` on every server. FAILED_PRECONDITION
// (from the server) when one is already past it.
absl::Status ArmCheckpoint(const ShardChannels& channels, uint64_t step,
                           const std::string& directory);

// Waits (each call under `timeout`) until every server's shard file of
// `step` is written; one response per server, in index order.
absl::StatusOr<std::vector<v1::CheckpointResponse>> WaitCheckpoint(
    const ShardChannels& channels, uint64_t step, const std::string& directory,
    absl::Duration timeout);

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
                              const std::vector<v1::CheckpointResponse>& files,
                              const CheckpointInfo& info, int keep_last);

// Restores every server from the checkpoint of `step` (newest when unset);
// one response per server. All of them end at the same version or the call
// fails.
absl::StatusOr<std::vector<v1::RestoreResponse>> RestoreAll(
    const ShardChannels& channels, const std::string& directory,
    std::optional<uint64_t> step, absl::Duration timeout);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_CHECKPOINT_CLIENT_H_
