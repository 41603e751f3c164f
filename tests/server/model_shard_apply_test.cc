// ModelShard's multi-threaded apply of a large push (kParallelApplyElems or
// more elements: whole chunk runs handed to the pool's threads) against the
// specification, AdamUpdateReference (optim/optimizer.h), run element by
// element on a copy of the state: master, m, v and the BF16 mirror bit for
// bit, for FP32 and BF16 gradients, over two steps (Adam t 1 and 2), with
// the push cut into random pieces across chunk boundaries, in random order.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "optim/optimizer.h"
#include "server/model_shard.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"

namespace zeroshard {
namespace {

// The pool is sized once per process from OptimizerThreads(); on a
// one-core machine ask for 4, so the parallel path is the one tested.
const bool kThreadsSet = [] {
  if (std::thread::hardware_concurrency() < 2) {
    setenv("ZEROSHARD_OPTIMIZER_THREADS", "4", /*overwrite=*/0);
  }
  return true;
}();

v1::ModelManifest OneTensor(int64_t elems) {
  v1::ModelManifest m;
  m.set_partition_count(1);
  v1::UnitSpec* u = m.add_units();
  u->set_name("unit");
  v1::TensorSpec* t = u->add_tensors();
  t->set_name("w");
  t->add_shape(elems);
  testing::SetRules(t, v1::InitRule::NORMAL, 1.0, v1::NORM);
  return m;
}

TEST(ModelShardApplyTest, LargeThreadedApplyMatchesScalarReference) {
  ASSERT_TRUE(kThreadsSet);
  ASSERT_GE(OptimizerThreads(), 2) << "the parallel apply needs 2 threads";
  constexpr uint64_t kSeed = 20261130;  // fixed: a failure replays
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  std::mt19937_64 rng(kSeed);
  // 1.25 Mi elements in chunks of 64 Ki: 20 chunk runs, the last one short.
  const int64_t n = (int64_t{5} << 18) + 1000;
  ASSERT_GE(static_cast<uint64_t>(n), kParallelApplyElems);
  std::unique_ptr<ModelShard> shard =
      testing::MakeShard(OneTensor(n), 1, 0, /*seed=*/kSeed, 65536);
  ASSERT_NE(shard, nullptr);
  const FlatRange own = shard->owned();
  ASSERT_GE(own.size(), kParallelApplyElems);
  ASSERT_GE(shard->store().num_chunks(), 4u);

  testing::ShardState want = testing::ReadState(*shard);
  const double coefficients[2] = {0.375, 1.0 / 3};
  for (uint64_t step = 0; step < 2; ++step) {
    const bool bf16 = step == 1;
    SCOPED_TRACE(::testing::Message() << "step " << step << " bf16 " << bf16);
    const DType dtype = bf16 ? DType::kBf16 : DType::kFp32;
    const std::vector<float> before_master = want.arrays[0];
    std::shared_ptr<std::vector<char>> bytes =
        testing::RandomBytes(rng, own, dtype);
    // The reference, on the whole range at once (the update is
    // elementwise and every chunk is at Adam step t = step + 1).
    const AdamStep adam =
        MakeAdamStep(shard->optimizer(), step + 1,
                     static_cast<float>(coefficients[step]));
    std::vector<uint16_t> want_mirror(own.size());
    // AdamW's slots, in its rule's order (exp_avg, exp_avg_sq).
    AdamSlice slice{.master = want.arrays[0].data(),
                    .exp_avg = want.arrays[1].data(),
                    .exp_avg_sq = want.arrays[2].data(),
                    .mirror = want_mirror.data(),
                    .n = own.size()};
    AdamUpdateReference(adam,
                        bf16 ? GradView::Bf16(reinterpret_cast<const uint16_t*>(
                                   bytes->data()))
                             : GradView::Fp32(reinterpret_cast<const float*>(
                                   bytes->data())),
                        slice);
    // The push: random pieces, in random order, one ApplyPush.
    std::vector<FlatRange> tiling = testing::RandomTiling(rng, own, 37);
    std::shuffle(tiling.begin(), tiling.end(), rng);
    std::vector<GradPiece> pieces;
    for (const FlatRange& r : tiling) {
      pieces.push_back({r, dtype,
                        bytes->data() + (r.begin - own.begin) * DTypeSize(dtype)});
    }
    absl::StatusOr<ApplyResult> r =
        shard->ApplyPush(step, {coefficients[step], false}, pieces);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->applied_elems, own.size());
    EXPECT_EQ(r->chunks_completed, shard->store().num_chunks());
    for (size_t c = 0; c < shard->store().num_chunks(); ++c) {
      want.versions[c] = step + 1;
      want.adam_t[c] = step + 1;
    }
    const testing::ShardState got = testing::ReadState(*shard);
    EXPECT_EQ(testing::Diff(got, want), "");
    // The mirror is BF16(master), written in the same pass.
    std::vector<uint16_t> mirror(own.size());
    ASSERT_TRUE(shard->store().Read(own, DType::kBf16, mirror.data()).ok());
    size_t bad = 0;
    for (size_t i = 0; i < own.size(); ++i) bad += mirror[i] != want_mirror[i];
    EXPECT_EQ(bad, 0u) << "mirror elements differ from the reference";
    // The step moved (nearly) every weight: the comparison is not of two
    // unchanged states.
    size_t moved = 0;
    for (size_t i = 0; i < own.size(); ++i) {
      moved += got.arrays[0][i] != before_master[i];
    }
    EXPECT_GT(moved, own.size() * 9 / 10);
  }
}

}  // namespace
}  // namespace zeroshard
