// A shard under optimizer kind ADAMW_8BIT: a step's pieces must cover
// whole blocks (a push that leaves part of one out is refused before
// anything is claimed, and the same step then goes through whole); an
// in-memory snapshot, a checkpoint file and Inspect's norms all give the
// store's dequantized state.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "optim/quant8.h"
#include "server/model_shard.h"
#include "server/shard_checkpoint.h"
#include "server/shard_snapshot.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace model_shard_q8_test {
namespace {

constexpr uint64_t kChunk = 4096;

std::unique_ptr<ModelShard> MakeQ8Shard(uint64_t seed) {
  v1::InitRequest init = testing::MakeInit(testing::SmallManifest(2), 2, 1,
                                           seed, kChunk);
  init.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAMW_8BIT);
  auto shard = ModelShard::Create(init, {1, 2}, Placement::kHost);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? *std::move(shard) : nullptr;
}

// Slot k's dequantized values over the owned range, read from the store.
std::vector<float> StoreValues(const ModelShard& shard, size_t k) {
  const ShardStore& s = shard.store();
  std::vector<float> out(shard.owned().size());
  for (size_t c = 0; c < s.num_chunks(); ++c) {
    EXPECT_TRUE(s.WithChunkLocked(c, [&](const ShardStore::ChunkArrays& a) {
                   a.Values(k, s.rule().slots()[k],
                            out.data() + (a.range.begin - shard.owned().begin));
                 }).ok());
  }
  return out;
}

TEST(ModelShardQ8Test, WholeBlocksOnlyAndEverySnapshotGivesTheDequantizedState) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::unique_ptr<ModelShard> shard = MakeQ8Shard(seed);
  ASSERT_NE(shard, nullptr);
  const FlatRange owned = shard->owned();
  ASSERT_GT(owned.size(), 3 * kQ8SlotBlock) << "too small to cut blocks";
  ASSERT_NE(owned.begin % kQ8SlotBlock, 0u) << "blocks should not start at 0";
  const StepParams params{0.5, false};
  for (uint64_t step = 0; step < 3; ++step) {
    const std::vector<float> g = testing::RandomGrad(rng, owned.size());
    // Pieces cut anywhere, all in one apply: whole blocks.
    std::vector<GradPiece> pieces;
    for (const FlatRange& r : testing::RandomTiling(rng, owned, 5)) {
      pieces.push_back({r, DType::kFp32, g.data() + (r.begin - owned.begin)});
    }
    if (step == 1) {
      // One piece alone ends inside a block: refused, nothing claimed.
      const FlatRange part{owned.begin, owned.begin + 3000};
      const GradPiece lone{part, DType::kFp32, g.data()};
      absl::StatusOr<ApplyResult> r = shard->ApplyPush(step, params, {&lone, 1});
      EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
      EXPECT_NE(r.status().message().find("whole blocks"), std::string::npos)
          << r.status();
    }
    absl::StatusOr<ApplyResult> r = shard->ApplyPush(step, params, pieces);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->applied_elems, owned.size());
  }
  ASSERT_TRUE(shard->store().fault().ok());
  const std::vector<float> m = StoreValues(*shard, 0), v = StoreValues(*shard, 1);
  double norm_m = 0;
  size_t nonzero = 0;
  for (float x : m) {
    norm_m += static_cast<double>(x) * x;
    nonzero += x != 0;
  }
  EXPECT_GT(nonzero, owned.size() / 2);
  auto norms = shard->store().Norms();
  ASSERT_TRUE(norms.ok());
  EXPECT_DOUBLE_EQ(norms->slots[0], std::sqrt(norm_m));

  const std::string dir = testing::MakeTempDir("zs_q8_snap_");
  for (const std::string& d : {std::string(), dir}) {
    auto snap = shard->ArmSnapshot(3, d);
    ASSERT_TRUE(snap.ok()) << snap.status();
    absl::StatusOr<SnapshotResult> done = testing::WaitForSnapshot(**snap);
    ASSERT_TRUE(done.ok()) << done.status();
    const v1::ShardCheckpointHeader& h = (*snap)->header();
    ASSERT_EQ(h.state_slot_formats_size(), 2);
    EXPECT_EQ(h.state_slot_formats(0), v1::STATE_SLOT_Q8_SIGNED);
    EXPECT_EQ(h.state_slot_formats(1), v1::STATE_SLOT_Q8_UNSIGNED);
    std::vector<float> got(owned.size());
    for (size_t k = 0; k < 2; ++k) {
      const std::vector<float>& want = k == 0 ? m : v;
      if (d.empty()) {
        (*snap)->Values(1 + k, owned, got.data());
      } else {
        auto info = VerifyShardCheckpoint(done->path);
        ASSERT_TRUE(info.ok()) << info.status();
        // The file is master, then codes and scales per slot.
        EXPECT_EQ(info->file_bytes, info->arrays_offset + 4 * owned.size() +
                                        2 * SlotBytes(SlotFormat::kQ8Signed, owned.size()) + 8);
        // A range that starts and ends inside blocks.
        const FlatRange mid{owned.begin + 1000, owned.end - 1000};
        ASSERT_TRUE(ReadShardCheckpointRange(done->path, *info, 1 + k, mid,
                                             got.data() + 1000).ok());
        std::copy(want.begin(), want.begin() + 1000, got.begin());
        std::copy(want.end() - 1000, want.end(), got.end() - 1000);
      }
      EXPECT_EQ(testing::FirstDifference(got, want), SIZE_MAX)
          << "slot " << k << (d.empty() ? " in memory" : " in the file");
    }
  }
}

}  // namespace
}  // namespace model_shard_q8_test
}  // namespace zeroshard
