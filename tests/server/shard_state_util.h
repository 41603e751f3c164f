// Shared pieces of the ModelShard unit tests (no gRPC): building a shard from
// a test InitRequest, reading a shard's whole state (master, exp_avg,
// exp_avg_sq, the chunks' versions and Adam steps) and comparing two states
// bit for bit, waiting for a snapshot, and random gradients.
//
//   std::unique_ptr<ModelShard> shard = testing::MakeTestShard(seed);
//   const testing::ShardState before = testing::ReadState(*shard);
//   ...
//   EXPECT_EQ(testing::Diff(testing::ReadState(*shard), before), "");
#ifndef ZEROSHARD_TESTS_SERVER_SHARD_STATE_UTIL_H_
#define ZEROSHARD_TESTS_SERVER_SHARD_STATE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/model_shard.h"
#include "server/shard_snapshot.h"

namespace zeroshard::testing {

// Server `server_index` of `num_servers` over `manifest` (MakeInit with
// `seed` and `chunk_elems`), on the host. Null, with a test failure, if
// ModelShard::Create fails.
std::unique_ptr<ModelShard> MakeShard(const v1::ModelManifest& manifest,
                                      uint32_t num_servers,
                                      uint32_t server_index, uint64_t seed,
                                      uint64_t chunk_elems);

// The shard the two-phase and snapshot tests train: server kTestServer of
// kTestServers over SmallManifest(2), chunks of kTestChunkElems, so its
// owned range does not start at 0 and it has a dozen chunks or more.
constexpr uint32_t kTestServers = 2;
constexpr uint32_t kTestServer = 1;
constexpr uint64_t kTestChunkElems = 256;
std::unique_ptr<ModelShard> MakeTestShard(uint64_t seed);

// A shard's master, exp_avg, exp_avg_sq over its owned range, and its
// chunks' versions and Adam steps. == compares bit for bit.
struct ShardState {
  std::vector<float> arrays[3];
  std::vector<uint64_t> versions, adam_t;
  friend bool operator==(const ShardState& a, const ShardState& b);
};

// The names of ShardState::arrays (and of ShardSnapshot::array(i)).
extern const char* const kArrayNames[3];

ShardState ReadState(const ModelShard& shard);

// "" when equal bit for bit; otherwise what differs first.
std::string Diff(const ShardState& got, const ShardState& want);

// The first index where a[i] and b[i] differ bit for bit (a holds at least
// b.size() values), SIZE_MAX if none.
size_t FirstDifference(const float* a, const std::vector<float>& b);
// As above; 0 when the sizes differ.
size_t FirstDifference(const std::vector<float>& a,
                       const std::vector<float>& b);

// The snapshot's result, or DEADLINE_EXCEEDED after 60 s.
absl::StatusOr<SnapshotResult> WaitForSnapshot(ShardSnapshot& snap);

// `n` standard normal values.
std::vector<float> RandomGrad(std::mt19937_64& rng, size_t n);
// Standard normal values for `r` as `dtype` (FP32 or BF16) bytes.
std::shared_ptr<std::vector<char>> RandomBytes(std::mt19937_64& rng,
                                               FlatRange r, DType dtype);
// `owned` cut at `cuts` random points (anywhere, across chunk boundaries
// too): the pieces, in order, that tile it exactly once.
std::vector<FlatRange> RandomTiling(std::mt19937_64& rng, FlatRange owned,
                                    int cuts);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SERVER_SHARD_STATE_UTIL_H_
