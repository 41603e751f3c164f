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
#include "client/shard_channels.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// A snapshot's arrays are named: "master", or one of the servers'
// optimizer state slots (ClusterView::state_slots; AdamW: exp_avg,
// exp_avg_sq).
inline constexpr char kMasterState[] = "master";

// What every server reports, and the layout it implies.
struct ClusterView {
  FlatLayout layout;
  std::vector<v1::InspectResponse> servers;  // in index order
  uint64_t max_version = 0;                  // over servers
  uint64_t min_adam_step = 0;
  // The optimizer rule's state slots, as every server names them.
  std::vector<std::string> state_slots;
  // "master" and the state slots: what a snapshot can read.
  std::vector<std::string> StateNames() const;
  // INVALID_ARGUMENT naming the choices unless `name` is one of StateNames().
  absl::Status CheckStateName(const std::string& name) const;
};

// Inspects every server: all must answer, be initialised, agree on the
// server count (== channels.size()) and manifest, and own the ranges the
// layout assigns them (FAILED_PRECONDITION naming the server otherwise).
absl::StatusOr<ClusterView> InspectCluster(const ShardChannels& channels);

struct SnapshotReadOptions {
  // Deadline of waiting for the snapshot, and of each read.
  absl::Duration timeout = absl::Seconds(60);
  int max_tries = 5;
};

// Arms a snapshot in `directory` ("" in memory) at one step on `servers`
// (indices) and waits until each server's copy is complete: `step` when
// given (no retry), else as described above. Returns the step and one
// response per listed server.
struct ArmedSnapshot {
  uint64_t step = 0;
  std::vector<v1::CheckpointResponse> responses;
};
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

struct ConsistentSnapshot {
  uint64_t step = 0;
  FlatRange range;
  // One per requested array, in request order; range.size() floats each.
  std::vector<std::vector<float>> arrays;
};

// A consistent copy of `range` (inside [0, total)) of the requested arrays.
absl::StatusOr<ConsistentSnapshot> ReadConsistentSnapshot(
    const ShardChannels& channels, const FlatLayout& layout, FlatRange range,
    const std::vector<std::string>& arrays,
    const SnapshotReadOptions& options);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SNAPSHOT_READER_H_
