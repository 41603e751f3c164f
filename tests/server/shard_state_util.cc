#include "tests/server/shard_state_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace zeroshard::testing {

std::unique_ptr<ModelShard> MakeShard(const v1::ModelManifest& manifest,
                                      uint32_t num_servers,
                                      uint32_t server_index, uint64_t seed,
                                      uint64_t chunk_elems) {
  const v1::InitRequest init =
      MakeInit(manifest, num_servers, server_index, seed, chunk_elems);
  auto shard = ModelShard::Create(init, {server_index, num_servers},
                                  Placement::kHost);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? *std::move(shard) : nullptr;
}

std::unique_ptr<ModelShard> MakeTestShard(uint64_t seed) {
  return MakeShard(SmallManifest(2), kTestServers, kTestServer, seed,
                   kTestChunkElems);
}

const char* const kArrayNames[3] = {"master", "exp_avg", "exp_avg_sq"};

bool operator==(const ShardState& a, const ShardState& b) {
  for (int i = 0; i < 3; ++i) {
    if (a.arrays[i].size() != b.arrays[i].size() ||
        std::memcmp(a.arrays[i].data(), b.arrays[i].data(),
                    a.arrays[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return a.versions == b.versions && a.adam_t == b.adam_t;
}

ShardState ReadState(const ModelShard& shard) {
  ShardState s;
  const FlatRange owned = shard.owned();
  for (auto& a : s.arrays) a.resize(owned.size());
  for (size_t c = 0; c < shard.store().num_chunks(); ++c) {
    const absl::Status read =
        shard.store().WithChunkLocked(c, [&](const ShardStore::ChunkArrays& a) {
      const size_t i = a.range.begin - owned.begin;
      const size_t bytes = a.range.size() * sizeof(float);
      std::memcpy(s.arrays[0].data() + i, a.master, bytes);
      std::memcpy(s.arrays[1].data() + i, a.slots[0], bytes);
      std::memcpy(s.arrays[2].data() + i, a.slots[1], bytes);
    });
    // Host placements cannot fail; a device fault shows as a NaN state.
    if (!read.ok()) s.arrays[0].assign(owned.size(), std::nanf(""));
    s.versions.push_back(shard.tracker().version(c));
    s.adam_t.push_back(shard.tracker().adam_t(c));
  }
  return s;
}

std::string Diff(const ShardState& got, const ShardState& want) {
  for (int a = 0; a < 3; ++a) {
    if (got.arrays[a].size() != want.arrays[a].size()) {
      return absl::StrCat(kArrayNames[a], " size");
    }
    const size_t i = FirstDifference(got.arrays[a], want.arrays[a]);
    if (i != SIZE_MAX) {
      return absl::StrCat(kArrayNames[a], " differs at owned element ", i,
                          ": ", got.arrays[a][i], " vs ", want.arrays[a][i]);
    }
  }
  if (got.versions != want.versions) return "versions differ";
  if (got.adam_t != want.adam_t) return "Adam steps differ";
  return "";
}

size_t FirstDifference(const float* a, const std::vector<float>& b) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  }
  return SIZE_MAX;
}

size_t FirstDifference(const std::vector<float>& a,
                       const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  return FirstDifference(a.data(), b);
}

absl::StatusOr<SnapshotResult> WaitForSnapshot(ShardSnapshot& snap) {
  absl::Notification done;
  snap.AddWaiter([&](const absl::StatusOr<SnapshotResult>&) { done.Notify(); });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return absl::DeadlineExceededError(
        absl::StrCat("snapshot of step ", snap.step(), " never finished"));
  }
  return *snap.result();
}

std::vector<float> RandomGrad(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> g(0, 1);
  std::vector<float> out(n);
  for (float& x : out) x = g(rng);
  return out;
}

std::shared_ptr<std::vector<char>> RandomBytes(std::mt19937_64& rng,
                                               FlatRange r, DType dtype) {
  std::normal_distribution<float> g(0, 1);
  auto out = std::make_shared<std::vector<char>>(r.size() * DTypeSize(dtype));
  for (uint64_t i = 0; i < r.size(); ++i) {
    const float x = g(rng);
    if (dtype == DType::kBf16) {
      const uint16_t h = FloatToBf16(x);
      std::memcpy(out->data() + 2 * i, &h, 2);
    } else {
      std::memcpy(out->data() + 4 * i, &x, 4);
    }
  }
  return out;
}

std::vector<FlatRange> RandomTiling(std::mt19937_64& rng, FlatRange owned,
                                    int cuts) {
  std::vector<uint64_t> at = {owned.begin, owned.end};
  for (int i = 0; i < cuts; ++i) {
    at.push_back(owned.begin + rng() % owned.size());
  }
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  std::vector<FlatRange> pieces;
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    pieces.push_back({at[i], at[i + 1]});
  }
  return pieces;
}

}  // namespace zeroshard::testing
