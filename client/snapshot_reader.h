// A consistent copy of the model (or part of it) read from running shard
// servers without pausing training: every server that owns part of the
// range arms an in-memory snapshot (Checkpoint with directory "") at one
// step v, waits until its copy of version v is complete, and then serves it
// with ReadSnapshot. Training goes on meanwhile; each chunk pauses only for
// its copy.
//
//   ASSIGN_OR_RETURN(ClusterView view, InspectCluster(*channels));
//   ASSIGN_OR_RETURN(ConsistentSnapshot snap, ReadConsistentSnapshot(
//       *channels, view.layout, {0, view.layout.total_elems()},
//       {kMasterState}, SnapshotReadOptions{}));
//   // snap.step, snap.arrays[0] (snap.range.size() floats)
//
// The step: the servers' highest version; when a server is already past it
// (FAILED_PRECONDITION: training moved on) the highest version then plus
// one, up to `max_tries` times. On idle servers the first try succeeds.
#ifndef ZEROSHARD_CLIENT_SNAPSHOT_READER_H_
#define ZEROSHARD_CLIENT_SNAPSHOT_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/server_status.h"
#include "client/shard_channels.h"
#include "client/snapshot.h"
#include "common/layout.h"

namespace zeroshard {

// Inspects every server: all must answer, be initialised, agree on the
// server count (== channels.size()) and manifest, and own the ranges the
// layout assigns them (FAILED_PRECONDITION naming the server otherwise).
absl::StatusOr<ClusterView> InspectCluster(const ShardChannels& channels);

// Arms a snapshot in `directory` ("" in memory) at one step on `servers`
// (indices) and waits until each server's copy is complete: `step` when
// given (no retry), else as described above. Returns the step and one
// response per listed server.
absl::StatusOr<ArmedSnapshot> SnapshotAtOneStep(
    const ShardChannels& channels, const std::vector<int>& servers,
    const std::string& directory, std::optional<uint64_t> step,
    const SnapshotReadOptions& options);

// Reads `range` (inside server k's owned range) of state `array` ("master"
// or a slot name) from server k's
// complete in-memory snapshot of `step` into dst (range.size() floats).
absl::Status ReadSnapshotRange(const ShardChannels& channels, int k,
                               uint64_t step, FlatRange range,
                               const std::string& array,
                               const SnapshotReadOptions& options, float* dst);

// A consistent copy of `range` (inside [0, total)) of the requested arrays.
absl::StatusOr<ConsistentSnapshot> ReadConsistentSnapshot(
    const ShardChannels& channels, const FlatLayout& layout, FlatRange range,
    const std::vector<std::string>& arrays,
    const SnapshotReadOptions& options);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SNAPSHOT_READER_H_
