// What a Gather returns (client/shard_cluster.h).
#ifndef ZEROSHARD_CLIENT_GATHER_RESULT_H_
#define ZEROSHARD_CLIENT_GATHER_RESULT_H_

#include <cstdint>

namespace zeroshard {

// What came back from a Gather.
struct GatherResult {
  // Lowest and highest chunk version among the pieces received.
  uint64_t min_version = 0;
  uint64_t max_version = 0;
  uint64_t bytes = 0;
};

// Folds b into a (versions span, bytes add up); `first`: a is empty.
void MergeGatherResult(const GatherResult& b, bool first, GatherResult* a);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_GATHER_RESULT_H_
