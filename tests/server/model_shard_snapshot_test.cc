// ModelShard snapshots while training goes on: several threads push random
// FP32 gradient pieces of steps 0..K concurrently, and every snapshot — armed
// before the run, armed late while chunks are at different versions, armed
// at the run's last version — holds exactly the master, exp_avg and
// exp_avg_sq of a reference shard stopped at its step (same init, the same
// gradients applied in order), bit for bit, with the per-chunk Adam steps.
// Skipped steps included; in-memory snapshots and shard files both.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
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
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"
#include "tests/support/test_files.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

using testing::FirstDifference;
using testing::kArrayNames;
using testing::kTestServer;
using testing::kTestServers;
using testing::MakeTestShard;
using testing::ReadState;
using testing::WaitForSnapshot;
using State = testing::ShardState;

// One step: its agreed parameters, a gradient over the owned range, and
// pushes (each a few disjoint pieces) that cover the range exactly once.
struct StepPlan {
  StepParams params;
  std::vector<float> grad;
  std::vector<std::vector<FlatRange>> pushes;
};

StepPlan MakeStep(std::mt19937_64& rng, FlatRange owned, bool skip) {
  StepPlan p;
  p.params.coefficient = std::uniform_real_distribution<double>(0.05, 2)(rng);
  p.params.skip = skip;
  p.grad = testing::RandomGrad(rng, owned.size());
  std::vector<FlatRange> pieces =
      testing::RandomTiling(rng, owned, 10 + static_cast<int>(rng() % 30));
  std::shuffle(pieces.begin(), pieces.end(), rng);
  for (size_t i = 0; i < pieces.size();) {
    const size_t k = std::min<size_t>(1 + rng() % 3, pieces.size() - i);
    p.pushes.emplace_back(pieces.begin() + i, pieces.begin() + i + k);
    i += k;
  }
  return p;
}

std::vector<GradPiece> Pieces(const StepPlan& p, FlatRange owned,
                              const std::vector<FlatRange>& ranges) {
  std::vector<GradPiece> out;
  for (const FlatRange& r : ranges) {
    out.push_back({r, DType::kFp32, p.grad.data() + (r.begin - owned.begin)});
  }
  return out;
}

// Pushes until accepted, waiting while a chunk is behind the step
// (ABORTED "ahead"); "" or the error.
std::string PushWhenReady(ModelShard& shard, uint64_t step,
                          const StepPlan& plan,
                          const std::vector<FlatRange>& ranges) {
  const auto pieces = Pieces(plan, shard.owned(), ranges);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    absl::StatusOr<ApplyResult> r = shard.ApplyPush(step, plan.params, pieces);
    if (r.ok()) {
      uint64_t elems = 0;
      for (const FlatRange& x : ranges) elems += x.size();
      if (r->applied_elems != elems || r->duplicate_elems != 0) {
        return absl::StrCat("step ", step, ": applied ", r->applied_elems,
                            " duplicate ", r->duplicate_elems, " of ", elems);
      }
      return "";
    }
    if (!absl::IsAborted(r.status()) ||
        r.status().message().find("ahead") == std::string::npos) {
      return r.status().ToString();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::StrCat("step ", step, " never became ready");
    }
    std::this_thread::yield();
  }
}

// The reference: the same pushes applied by one thread, one whole-range
// push per step; states[v] is the state at version v.
std::vector<State> RunReference(uint64_t seed,
                                const std::vector<StepPlan>& steps) {
  std::unique_ptr<ModelShard> ref = MakeTestShard(seed);
  std::vector<State> states = {ReadState(*ref)};
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto pieces = Pieces(steps[s], ref->owned(), {ref->owned()});
    auto r = ref->ApplyPush(s, steps[s].params, pieces);
    EXPECT_TRUE(r.ok()) << r.status();
    states.push_back(ReadState(*ref));
  }
  return states;
}

// Checks a finished snapshot against the reference state at its step.
void ExpectSnapshotIs(ShardSnapshot& snap, const State& want) {
  SCOPED_TRACE(absl::StrCat("snapshot of step ", snap.step(), " in '",
                            snap.directory(), "'"));
  absl::StatusOr<SnapshotResult> r = WaitForSnapshot(snap);
  ASSERT_TRUE(r.ok()) << r.status();
  if (snap.directory().empty()) {
    for (int a = 0; a < 3; ++a) {
      EXPECT_EQ(FirstDifference(snap.array(a), want.arrays[a]), SIZE_MAX)
          << kArrayNames[a] << " differs from the reference at this element";
    }
  } else {
    // Written: the copy is freed and the file (checked below) is what is
    // left.
    EXPECT_EQ(snap.array(0), nullptr);
  }
  const v1::ShardCheckpointHeader& h = snap.header();
  EXPECT_EQ(h.step(), snap.step());
  ASSERT_EQ(static_cast<size_t>(h.chunk_adam_steps_size()), want.adam_t.size());
  for (size_t c = 0; c < want.adam_t.size(); ++c) {
    EXPECT_EQ(h.chunk_versions(c), snap.step()) << c;
    EXPECT_EQ(h.chunk_adam_steps(c), want.adam_t[c]) << c;
  }
  if (snap.directory().empty()) {
    EXPECT_EQ(r->path, "");
    return;
  }
  EXPECT_EQ(r->path, snap.FilePath());
  EXPECT_EQ(r->path, absl::StrCat(snap.directory(), "/",
                                  CheckpointFolderName(snap.step()), "/",
                                  ShardFileName(kTestServer, kTestServers)));
  absl::StatusOr<ShardCheckpointInfo> info = VerifyShardCheckpoint(r->path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->checksum, r->checksum);
  EXPECT_EQ(info->file_bytes, r->bytes);
  EXPECT_EQ(info->header.step(), snap.step());
  EXPECT_EQ(info->header.SerializeAsString(), h.SerializeAsString());
  const FlatRange owned{h.owned().offset(),
                        h.owned().offset() + h.owned().length()};
  std::vector<float> back(owned.size());
  for (int a = 0; a < 3; ++a) {
    ASSERT_TRUE(ReadShardCheckpointRange(r->path, *info,
                                         static_cast<size_t>(a), owned,
                                         back.data())
                    .ok());
    EXPECT_EQ(FirstDifference(back.data(), want.arrays[a]), SIZE_MAX)
        << kArrayNames[a] << " in the file differs from the reference";
  }
}

TEST(ModelShardSnapshotTest, ConcurrentPushesSnapshotsEqualTheReference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  constexpr uint64_t kSteps = 8;
  constexpr int kThreads = 4;
  std::unique_ptr<ModelShard> shard = MakeTestShard(seed % 1000);
  ASSERT_NE(shard, nullptr);
  const FlatRange owned = shard->owned();
  ASSERT_GT(shard->store().num_chunks(), 20u);

  std::vector<StepPlan> steps;
  const uint64_t forced_skip = rng() % (kSteps - 1);
  for (uint64_t s = 0; s < kSteps; ++s) {
    steps.push_back(MakeStep(rng, owned, s == forced_skip || rng() % 5 == 0));
  }
  const std::vector<State> ref = RunReference(seed % 1000, steps);

  // Armed before the run: in memory, as a file, at the start, at the end
  // (no claim of step K ever comes: copied as chunks complete to K).
  const std::string dir = testing::MakeTempDir("zs_snap_");
  ASSERT_FALSE(dir.empty());
  const uint64_t s_mem = 1 + rng() % (kSteps - 1);
  const uint64_t s_file = 1 + rng() % (kSteps - 1);
  std::vector<std::shared_ptr<ShardSnapshot>> snaps;
  for (auto [step, d] : std::vector<std::pair<uint64_t, std::string>>{
           {s_mem, ""}, {s_file, dir}, {s_file, ""}, {0, ""}, {kSteps, dir}}) {
    auto snap = shard->ArmSnapshot(step, d);
    ASSERT_TRUE(snap.ok()) << snap.status();
    snaps.push_back(*snap);
  }
  // Arming the same (step, directory) again is the same snapshot.
  auto again = shard->ArmSnapshot(s_mem, "");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), snaps[0].get());
  EXPECT_TRUE(shard->SnapshotInProgress());

  // Every push of every step dealt to a random thread.
  std::vector<std::vector<std::pair<uint64_t, size_t>>> work(kThreads);
  for (uint64_t s = 0; s < kSteps; ++s) {
    for (size_t p = 0; p < steps[s].pushes.size(); ++p) {
      work[rng() % kThreads].push_back({s, p});
    }
  }
  // Pushes of steps >= kGate wait until the late snapshot is armed, so that
  // it is armed mid-run whatever the threads' speed.
  constexpr uint64_t kGate = kSteps - 2;
  std::atomic<bool> gate_open{false};
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (auto [s, p] : work[t]) {
        while (s >= kGate && !gate_open.load()) {
          if (std::chrono::steady_clock::now() > deadline) {
            failures[t] = "the gate never opened";
            return;
          }
          std::this_thread::yield();
        }
        failures[t] = PushWhenReady(*shard, s, steps[s], steps[s].pushes[p]);
        if (!failures[t].empty()) return;
      }
    });
  }
  // Armed late, mid-run, one past the newest chunk's version.
  std::shared_ptr<ShardSnapshot> late;
  std::string late_note, late_error;
  {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (late == nullptr && std::chrono::steady_clock::now() < deadline) {
      const StepTracker::Summary sum = shard->tracker().Summarize();
      if (sum.max_version < kSteps / 3) {
        std::this_thread::yield();
        continue;
      }
      auto snap = shard->ArmSnapshot(sum.max_version + 1, "");
      if (snap.ok()) {
        late = *snap;
        late_note = absl::StrCat("late arm at ", sum.max_version + 1,
                                 " with chunks at ", sum.min_version, "..",
                                 sum.max_version);
      } else if (!absl::IsFailedPrecondition(snap.status())) {
        late_error = snap.status().ToString();
        break;
      }
    }
  }
  gate_open = true;
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << t;
  EXPECT_EQ(late_error, "");
  ASSERT_NE(late, nullptr) << "could not arm a snapshot mid-run";
  SCOPED_TRACE(late_note);
  RecordProperty("late_arm", late_note);
  ASSERT_LE(late->step(), kSteps);

  // The run's end: every chunk at K, untouched; copied by the snapshot's
  // own thread after arming (no claim will come).
  auto end = shard->ArmSnapshot(kSteps, "");
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_TRUE(WaitForSnapshot(**end).ok());
  snaps.push_back(*end);
  snaps.push_back(late);

  for (const auto& snap : snaps) ExpectSnapshotIs(*snap, ref[snap->step()]);
  // The live shard went on to the end, unchanged by the copies.
  const State live = ReadState(*shard);
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(FirstDifference(live.arrays[a].data(), ref[kSteps].arrays[a]),
              SIZE_MAX);
  }
  EXPECT_EQ(live.adam_t, ref[kSteps].adam_t);
  EXPECT_FALSE(shard->SnapshotInProgress());
  EXPECT_EQ(shard->FindSnapshot(kSteps, "").get(), end->get());
  EXPECT_EQ(shard->FindSnapshot(kSteps + 1, ""), nullptr);
  // Nothing is left armed: the tracker can be reset.
  EXPECT_TRUE(shard->tracker()
                  .Reset(kSteps, std::vector<uint64_t>(
                                     shard->store().num_chunks(), 0))
                  .ok());
}

TEST(ModelShardSnapshotTest, ArmedWhileChunksAreAtDifferentVersions) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  constexpr uint64_t kSteps = 6;
  std::unique_ptr<ModelShard> shard = MakeTestShard(seed % 977);
  ASSERT_NE(shard, nullptr);
  const FlatRange owned = shard->owned();
  const size_t chunks = shard->store().num_chunks();
  std::vector<StepPlan> steps;
  for (uint64_t s = 0; s < kSteps; ++s) {
    steps.push_back(MakeStep(rng, owned, s == 1 || rng() % 4 == 0));
  }
  const std::vector<State> ref = RunReference(seed % 977, steps);

  // Each chunk runs to its own version in 0..3, at least one to each end;
  // chunks at 3 are untouched at 3.
  constexpr uint64_t kArm = 3;
  std::vector<uint64_t> target(chunks);
  for (uint64_t& v : target) v = rng() % (kArm + 1);
  target[rng() % chunks] = 0;
  target[rng() % chunks] = kArm;
  auto push_chunk = [&](size_t c, uint64_t s) {
    const FlatRange r = shard->store().ChunkRange(c);
    EXPECT_EQ(PushWhenReady(*shard, s, steps[s], {r}), "") << c;
  };
  for (size_t c = 0; c < chunks; ++c) {
    for (uint64_t s = 0; s < target[c]; ++s) push_chunk(c, s);
  }
  // Below the newest chunk: refused, and nothing is armed by it.
  auto refused = shard->ArmSnapshot(kArm - 1, "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(shard->SnapshotInProgress());
  auto snap = shard->ArmSnapshot(kArm, "");
  ASSERT_TRUE(snap.ok()) << snap.status();
  auto ahead = shard->ArmSnapshot(kArm + 2, "");
  ASSERT_TRUE(ahead.ok()) << ahead.status();
  // The rest of the run, chunk by chunk in a random order per step.
  for (uint64_t s = 0; s < kSteps; ++s) {
    std::vector<size_t> order(chunks);
    for (size_t c = 0; c < chunks; ++c) order[c] = c;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t c : order) {
      if (s >= target[c]) push_chunk(c, s);
    }
  }
  ExpectSnapshotIs(**snap, ref[kArm]);
  ExpectSnapshotIs(**ahead, ref[kArm + 2]);
}

// A shard file streams from the store (no copy of the shard): an update
// that reaches a chunk before the writer has read it sets the chunk aside
// first, and the file still holds the armed step. Here the writer cannot
// start before the update (one chunk is still short of the step), so the
// path is taken every run.
TEST(ModelShardSnapshotTest, AnUpdateBeforeTheWriterSetsItsChunkAside) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  constexpr uint64_t kSteps = 4, kArm = 2;
  std::unique_ptr<ModelShard> shard = MakeTestShard(seed % 991);
  ASSERT_NE(shard, nullptr);
  const FlatRange owned = shard->owned();
  const size_t chunks = shard->store().num_chunks();
  ASSERT_GE(chunks, 3u);
  std::vector<StepPlan> steps;
  for (uint64_t s = 0; s < kSteps; ++s) steps.push_back(MakeStep(rng, owned, false));
  const std::vector<State> ref = RunReference(seed % 991, steps);
  auto push_chunk = [&](size_t c, uint64_t s) {
    EXPECT_EQ(PushWhenReady(*shard, s, steps[s], {shard->store().ChunkRange(c)}),
              "")
        << "chunk " << c << " step " << s;
  };
  const std::string dir = testing::MakeTempDir("zs_snap_aside_");
  ASSERT_FALSE(dir.empty());
  auto snap = shard->ArmSnapshot(kArm, dir);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE((*snap)->streaming());
  // Every chunk but the last reaches the step, and the first goes past it.
  const size_t ahead = rng() % (chunks - 1);
  for (size_t c = 0; c + 1 < chunks; ++c) {
    for (uint64_t s = 0; s < kArm; ++s) push_chunk(c, s);
  }
  for (uint64_t s = kArm; s < kSteps; ++s) push_chunk(ahead, s);
  EXPECT_FALSE((*snap)->result().has_value());
  // The last chunk reaches the step: the writer starts, and reads the
  // chunk that went ahead from the copy set aside.
  for (uint64_t s = 0; s < kArm; ++s) push_chunk(chunks - 1, s);
  ExpectSnapshotIs(**snap, ref[kArm]);
  absl::StatusOr<SnapshotResult> r = WaitForSnapshot(**snap);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->copy_seconds, 0) << "no chunk was set aside";
  // Updates go on, and need nothing of the finished snapshot.
  for (size_t c = 0; c < chunks; ++c) {
    if (c == ahead) continue;
    for (uint64_t s = kArm; s < kSteps; ++s) push_chunk(c, s);
  }
  EXPECT_FALSE(shard->SnapshotInProgress());
  EXPECT_EQ(FirstDifference(ReadState(*shard).arrays[0].data(),
                            ref[kSteps].arrays[0]),
            SIZE_MAX);
}

// A shard that goes (a server re-initialised) while its file is being
// written stops the writer first: the write ends, finished or CANCELLED,
// and nothing reads the freed store (the sanitizer builds check).
TEST(ModelShardSnapshotTest, AShardThatGoesWhileItsFileIsWrittenStopsTheWriter) {
  for (int trial = 0; trial < 4; ++trial) {
    std::unique_ptr<ModelShard> shard = MakeTestShard(7 + trial);
    ASSERT_NE(shard, nullptr);
    const std::string dir = testing::MakeTempDir("zs_snap_gone_");
    auto snap = shard->ArmSnapshot(0, dir);
    ASSERT_TRUE(snap.ok()) << snap.status();
    std::shared_ptr<ShardSnapshot> held = *snap;
    if (trial % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
    shard.reset();
    const std::optional<absl::StatusOr<SnapshotResult>> r = held->result();
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->ok() || absl::IsCancelled(r->status())) << r->status();
  }
}

TEST(ModelShardSnapshotTest, AShardThatOwnsNothingFinishesAtOnce) {
  // Over more servers than the flat space has 64-element blocks, server 0
  // owns an empty range: its snapshot has no chunk to wait for.
  const v1::ModelManifest manifest = testing::SmallManifest(1);
  constexpr uint32_t kMany = 1000;
  auto layout = FlatLayout::Create(FromProto(manifest), kMany, 1);
  ASSERT_TRUE(layout.ok());
  ASSERT_TRUE(layout->ServerRange(0).empty());
  auto shard = ModelShard::Create(
      testing::MakeInit(manifest, kMany, 0, 1, testing::kTestChunkElems),
      {0, kMany}, Placement::kHost);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ((*shard)->store().num_chunks(), 0u);
  const std::string dir = testing::MakeTempDir("zs_snap_empty_");
  for (const std::string& d : {std::string(), dir}) {
    auto snap = (*shard)->ArmSnapshot(3, d);
    ASSERT_TRUE(snap.ok()) << snap.status();
    absl::StatusOr<SnapshotResult> r = WaitForSnapshot(**snap);
    ASSERT_TRUE(r.ok()) << r.status();
    if (!d.empty()) {
      auto info = VerifyShardCheckpoint(r->path);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->header.step(), 3u);
    }
  }
  EXPECT_FALSE((*shard)->SnapshotInProgress());
}

}  // namespace
}  // namespace zeroshard
