// With replicas: a server that takes its two copies back catches up while
// training goes on (docs/DESIGN.md, "Replicas"). Server k holds slot k and
// slot k - 1; while the workers leave it, each slot's other copy (server
// k + 1 for slot k, server k - 1 for slot k - 1) can keep the pushes it
// applies (the StepLog call), and k, restored from a checkpoint, applies
// them in the same order (Replay) until it stands where the others do.
//
//   RETURN_IF_ERROR(OpenStepLogs(channels, k, step));   // before step runs
//   ... a checkpoint of `step` is written, k is Init'ed and restored ...
//   ASSIGN_OR_RETURN(uint64_t version, ReplayStepLogs(channels, k));
//   ... between steps, once more, then channels.MarkUp(k) everywhere ...
//   CloseStepLogs(channels, k);
//
// The calls go to servers by index whether or not the client left them.
#ifndef ZEROSHARD_CLIENT_CATCH_UP_H_
#define ZEROSHARD_CLIENT_CATCH_UP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/shard_channels.h"

namespace zeroshard {

// The server other than k that holds a copy of `slot` (replicas 2).
int OtherHolder(const ShardChannels& channels, int slot, int k);

// The other copies of server k's two slots keep the pushes they apply for
// steps >= from_step. Call it between steps, before from_step runs;
// FAILED_PRECONDITION when a copy has applied some of from_step already, or
// when the other copy is left too (no copy to catch up from).
absl::Status OpenStepLogs(const ShardChannels& channels, int k,
                          uint64_t from_step);

// Server k's two copies apply what the other copies logged since each one's
// version (its lowest chunk version, InspectCopy); returns the lower of the
// two versions afterwards. RESOURCE_EXHAUSTED when a log outgrew its bound.
absl::StatusOr<uint64_t> ReplayStepLogs(const ShardChannels& channels, int k);

// Drops both logs (failures ignored: a log on a server that died went with
// it).
void CloseStepLogs(const ShardChannels& channels, int k);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_CATCH_UP_H_
