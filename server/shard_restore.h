// Restoring one server's shard from a checkpoint written by any number of
// servers and workers (docs/DESIGN.md, "Checkpoints").
//
// The checkpoint's MANIFEST.json names the writing layout (its model
// manifest, padded for its worker count, split over its server count).
// Every element of this server's owned range that belongs to a tensor is
// found by tensor in that layout (MapBetweenLayouts), then in the file of
// the old server that owned it; padding is zero. Every file read from is
// verified whole against its own checksum and the manifest's before any of
// it is used, and nothing in the shard changes unless all of it succeeded.
//
//   ASSIGN_OR_RETURN(RestoreStats r, RestoreShard(shard, "/ckpt", {}));
#ifndef ZEROSHARD_SERVER_SHARD_RESTORE_H_
#define ZEROSHARD_SERVER_SHARD_RESTORE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/model_shard.h"

namespace zeroshard {

struct RestoreStats {
  uint64_t step = 0;          // every chunk's version now
  uint64_t adam_step = 0;
  uint32_t files_verified = 0;
  uint64_t bytes_read = 0;
  double seconds = 0;
};

// Loads `shard` from the checkpoint of `step` in `directory` (the newest
// complete one when unset). NOT_FOUND when there is none; DATA_LOSS naming a
// file that is missing, truncated or corrupt or disagrees with the
// manifest; FAILED_PRECONDITION when the checkpoint holds another model or
// optimizer, or while a step is partly applied or a snapshot is armed.
absl::StatusOr<RestoreStats> RestoreShard(ModelShard& shard,
                                          const std::string& directory,
                                          std::optional<uint64_t> step);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_RESTORE_H_
