// What reading a consistent snapshot from running servers takes and gives
// (client/shard_cluster.h, ReadConsistentSnapshot): part of the client
// library's public API.
#ifndef ZEROSHARD_CLIENT_SNAPSHOT_H_
#define ZEROSHARD_CLIENT_SNAPSHOT_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "client/server_status.h"
#include "common/layout.h"

namespace zeroshard {

struct SnapshotReadOptions {
  // Deadline of waiting for the snapshot, and of each read.
  absl::Duration timeout = absl::Seconds(60);
  int max_tries = 5;
};

// Where a snapshot was armed, and each listed server's file of it.
struct ArmedSnapshot {
  uint64_t step = 0;
  std::vector<ShardFile> files;  // one per listed server
};

// A consistent copy of a range of the model at one step.
struct ConsistentSnapshot {
  uint64_t step = 0;
  FlatRange range;
  // One per requested array, in request order; range.size() floats each.
  std::vector<std::vector<float>> arrays;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SNAPSHOT_H_
