// One Gather call to one server, reading replies as raw bytes and copying
// each piece straight into the caller's buffer (one copy per byte). Part of
// ShardClient::Gather; retried as a whole on UNAVAILABLE.
#ifndef ZEROSHARD_CLIENT_GATHER_STREAM_H_
#define ZEROSHARD_CLIENT_GATHER_STREAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/call_canceller.h"
#include "client/gather_result.h"
#include "client/shard_channels.h"
#include "common/dtype.h"
#include "common/layout.h"

namespace zeroshard {

// A requested range on one server and where its elements go.
struct GatherTarget {
  FlatRange range;
  uint8_t* dst = nullptr;
};

// Streams `targets` (disjoint, inside slot k's range) from slot k's first
// live copy (server k, or with replicas 2 server k + 1 once k is gone), with
// retries. Every piece is checked: dtype as asked, inside a requested range;
// and every requested element must arrive (DATA_LOSS otherwise). With
// `cancel`, the call can be cancelled from another thread (CANCELLED, not
// retried).
absl::StatusOr<GatherResult> GatherFromServer(const ShardChannels& channels,
                                              int server,
                                              std::vector<GatherTarget> targets,
                                              DType dtype, int64_t min_version,
                                              CallCanceller* cancel = nullptr);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_GATHER_STREAM_H_
