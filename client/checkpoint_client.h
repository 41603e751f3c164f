// The client side of coordinated checkpoints (docs/DESIGN.md,
// "Checkpoints"): arm every server at one step, wait for their shard files,
// commit the checkpoint with its MANIFEST.json; restore every server from
// one.
//
//   RETURN_IF_ERROR(ArmCheckpoint(channels, 30, "/ckpt", token));
//   ... step 30 runs; each server copies its chunks as they reach 30 ...
//   ASSIGN_OR_RETURN(auto files, WaitCheckpoint(channels, 30, "/ckpt", token,
//                                               absl::Minutes(5)));
//   RETURN_IF_ERROR(CommitCheckpoint("/ckpt", files, info, keep_last));
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
#include "client/checkpoint_commit.h"
#include "client/server_status.h"
#include "client/shard_channels.h"

namespace zeroshard {

// One Checkpoint call to server k (UNAVAILABLE retried): arm (wait false,
// under the control deadline) or wait for the file (under `timeout`).
absl::Status CheckpointOn(const ShardChannels& channels, int k, uint64_t step,
                          const std::string& directory, bool wait,
                          absl::Duration timeout,
                          ShardFile* file);

// Arms a snapshot of version `step` on every server. FAILED_PRECONDITION
// (from the server) when one is already past it.
absl::Status ArmCheckpoint(const ShardChannels& channels, uint64_t step,
                           const std::string& directory);

// Waits (each call under `timeout`) until every server's shard file of
// `step` is written; one response per server, in index order.
absl::StatusOr<std::vector<ShardFile>> WaitCheckpoint(
    const ShardChannels& channels, uint64_t step, const std::string& directory,
    absl::Duration timeout);

// Restores every server from the checkpoint of `step` (newest when unset);
// one response per server. All of them end at the same version or the call
// fails.
// Restore of slot `slot`'s copy on server k alone from `directory`'s
// checkpoint of `step` (a replacement's copies: ShardCluster::ReviveServer).
absl::StatusOr<ServerRestore> RestoreCopy(const ShardChannels& channels,
                                          int slot, int k,
                                          const std::string& directory,
                                          uint64_t step,
                                          absl::Duration timeout);

absl::StatusOr<std::vector<ServerRestore>> RestoreAll(
    const ShardChannels& channels, const std::string& directory,
    std::optional<uint64_t> step, absl::Duration timeout);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_CHECKPOINT_CLIENT_H_
