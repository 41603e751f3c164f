// RestoreShard racing pushes: while two threads push step 0 of a fresh
// shard in small pieces, a restore of a step-3 checkpoint starts at a random
// point. It either restores whole (every chunk at 3, the checkpoint's state
// bit for bit; later step-0 pushes are ABORTED as stale) or fails with
// FAILED_PRECONDITION and changes nothing (the pushes complete and the shard
// equals a reference that got step 0 alone, bit for bit).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_manifest.h"
#include "gtest/gtest.h"
#include "server/model_shard.h"
#include "server/shard_checkpoint.h"
#include "server/shard_restore.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"
#include "tests/support/test_files.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

constexpr uint64_t kChunkElems = 256;
constexpr uint64_t kCheckpointStep = 3;

using testing::Diff;
using testing::RandomGrad;
using testing::ReadState;
using State = testing::ShardState;

std::unique_ptr<ModelShard> MakeShard(uint64_t seed) {
  return testing::MakeShard(testing::SmallManifest(1), 1, 0, seed,
                            kChunkElems);
}

// Trains a shard of seed 7 to kCheckpointStep and checkpoints it in `dir`;
// returns the state the checkpoint holds.
State WriteCheckpoint(const std::string& dir, std::mt19937_64& rng) {
  std::unique_ptr<ModelShard> src = MakeShard(7);
  EXPECT_NE(src, nullptr);
  if (src == nullptr) return {};
  // Padding gets no gradient (as in training): it stays zero, which is
  // what a restore writes there.
  std::vector<bool> in_tensor(src->owned().size(), false);
  for (const TensorInfo& t : src->layout().tensors()) {
    for (uint64_t i = 0; i < t.numel; ++i) {
      in_tensor[t.offset + i - src->owned().begin] = true;
    }
  }
  for (uint64_t s = 0; s < kCheckpointStep; ++s) {
    std::vector<float> g = RandomGrad(rng, src->owned().size());
    for (size_t i = 0; i < g.size(); ++i) {
      if (!in_tensor[i]) g[i] = 0;
    }
    const GradPiece piece{src->owned(), DType::kFp32, g.data()};
    EXPECT_TRUE(src->ApplyPush(s, {0.5, false}, {&piece, 1}).ok());
  }
  auto snap = src->ArmSnapshot(kCheckpointStep, dir);
  EXPECT_TRUE(snap.ok()) << snap.status();
  if (!snap.ok()) return {};
  absl::Notification done;
  (*snap)->AddWaiter(
      [&](const absl::StatusOr<SnapshotResult>&) { done.Notify(); });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  const absl::StatusOr<SnapshotResult> r = *(*snap)->result();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  CheckpointManifest m;
  m.step = kCheckpointStep;
  m.num_servers = 1;
  m.total_elems = src->layout().total_elems();
  m.model_fingerprint = ModelFingerprint(src->layout().manifest());
  m.model = src->layout().manifest();
  CheckpointShardEntry e;
  e.server_index = 0;
  e.owned = src->owned();
  e.file = std::filesystem::path(r->path).filename().string();
  e.checksum = r->checksum;
  e.bytes = r->bytes;
  m.shards.push_back(e);
  EXPECT_TRUE(WriteCheckpointManifest(dir, m).ok());
  return ReadState(*src);
}

TEST(ShardRestoreRaceTest, RestoreRacingPushesIsWholeOrChangesNothing) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  const std::string dir = testing::MakeTempDir("zs_restore_race_");
  ASSERT_FALSE(dir.empty());
  const State checkpoint = WriteCheckpoint(dir, rng);
  ASSERT_FALSE(checkpoint.versions.empty());

  constexpr int kTrials = 40;
  constexpr int kPushers = 2;
  int restored = 0, refused = 0, restored_mid_push = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const uint64_t shard_seed = rng() % 1000;
    std::unique_ptr<ModelShard> shard = MakeShard(shard_seed);
    std::unique_ptr<ModelShard> ref = MakeShard(shard_seed);
    ASSERT_NE(shard, nullptr);
    ASSERT_NE(ref, nullptr);
    const FlatRange owned = shard->owned();
    const StepParams params{std::uniform_real_distribution<double>(0.1, 2)(rng),
                            false};
    const std::vector<float> grad = RandomGrad(rng, owned.size());
    const GradPiece whole{owned, DType::kFp32, grad.data()};
    ASSERT_TRUE(ref->ApplyPush(0, params, {&whole, 1}).ok());
    // Step 0 in small pieces, cut anywhere, dealt to the pushers.
    const std::vector<FlatRange> pieces =
        testing::RandomTiling(rng, owned, 150);
    std::vector<std::vector<GradPiece>> work(kPushers);
    for (const FlatRange& r : pieces) {
      work[rng() % kPushers].push_back(
          {r, DType::kFp32, grad.data() + (r.begin - owned.begin)});
    }
    for (auto& w : work) std::shuffle(w.begin(), w.end(), rng);
    const size_t total = pieces.size();
    // Either the pushes start a random moment after the restore (which
    // reads and verifies the file first), or the restore starts once
    // `start_after` pushes are done: some, or all of them.
    const int mode = static_cast<int>(rng() % 3);
    const size_t start_after =
        mode == 0 ? 0 : mode == 1 ? total : rng() % (total + 1);
    // Short delays land the first claims while the restore reads the file.
    const auto push_delay =
        std::chrono::microseconds(rng() % (rng() % 2 ? 300 : 3000));
    std::atomic<bool> restore_started{false};

    std::atomic<size_t> pushed{0};
    std::atomic<bool> go{false};
    std::vector<std::string> errors(kPushers);
    std::vector<int> aborted(kPushers, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kPushers; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        if (mode == 0) {
          while (!restore_started.load()) std::this_thread::yield();
          std::this_thread::sleep_for(push_delay);
        }
        for (const GradPiece& p : work[t]) {
          absl::StatusOr<ApplyResult> r = shard->ApplyPush(0, params, {&p, 1});
          if (absl::IsAborted(r.status())) {
            ++aborted[t];  // stale: the shard was restored to step 3
          } else if (!r.ok()) {
            errors[t] = r.status().ToString();
            return;
          }
          ++pushed;
          std::this_thread::yield();
        }
      });
    }
    absl::StatusOr<RestoreStats> stats;
    std::thread restorer([&] {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (pushed.load() < start_after &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      restore_started = true;
      stats = RestoreShard(*shard, dir, std::nullopt);
    });
    go = true;
    for (auto& th : threads) th.join();
    restorer.join();
    for (int t = 0; t < kPushers; ++t) ASSERT_EQ(errors[t], "") << t;
    const State got = ReadState(*shard);
    if (stats.ok()) {
      ++restored;
      int stale = 0;
      for (int a : aborted) stale += a;
      if (stale > 0) ++restored_mid_push;  // some pushes came after it
      EXPECT_EQ(stats->step, kCheckpointStep);
      EXPECT_EQ(Diff(got, checkpoint), "")
          << "restored, yet not the checkpoint's state";
    } else {
      ++refused;
      EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition)
          << stats.status();
      for (int t = 0; t < kPushers; ++t) EXPECT_EQ(aborted[t], 0) << t;
      EXPECT_EQ(Diff(got, ReadState(*ref)), "")
          << "a refused restore changed the shard: " << stats.status();
    }
  }
  RecordProperty("restored", restored);
  RecordProperty("refused", refused);
  RecordProperty("restored_mid_push", restored_mid_push);
  std::printf("restored %d (%d with pushes after it), refused %d of %d\n",
              restored, restored_mid_push, refused, kTrials);
}

}  // namespace
}  // namespace zeroshard
