// RestoreShard: a checkpoint written by 2 in-process shards (shard files
// from directory snapshots, then MANIFEST.json) restores into shards of
// other layouts — 1 or 3 servers, another worker count (padding), another
// chunk size — with every tensor element's master, exp_avg and exp_avg_sq
// equal by tensor name, padding zero, versions at the step and the Adam
// step count right. A flipped byte, a cut-short or a missing file, another
// model, another optimizer, a missing step, a partial step or an armed
// snapshot are refused and leave the target shard as it was.
#include "server/shard_restore.h"

#include <filesystem>
#include <map>
#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/checkpoint_manifest.h"
#include "common/dtype.h"
#include "gtest/gtest.h"
#include "server/model_shard.h"
#include "tests/server/server_test_util.h"
#include "tests/server/shard_state_util.h"
#include "tests/support/test_files.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

constexpr uint32_t kSourceServers = 2;
constexpr uint32_t kSourceWorkers = 2;

using testing::FirstDifference;
using testing::kArrayNames;
using testing::MakeShard;
using testing::ReadState;
using State = testing::ShardState;

FlatLayout LayoutOf(const v1::ModelManifest& manifest, uint32_t servers) {
  auto layout = FlatLayout::Create(FromProto(manifest), servers,
                                   manifest.partition_count());
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

// Pushes one step of random gradient over the whole owned range.
void PushRandomStep(ModelShard& shard, std::mt19937_64& rng, uint64_t step,
                    bool skip) {
  const std::vector<float> grad =
      testing::RandomGrad(rng, shard.owned().size());
  const GradPiece piece{shard.owned(), DType::kFp32, grad.data()};
  auto r = shard.ApplyPush(step, {0.5, skip}, {&piece, 1});
  ASSERT_TRUE(r.ok()) << r.status();
}

// What a checkpoint holds: the source layout's whole flat space.
struct Flat {
  std::vector<float> arrays[3];
  uint64_t adam_t = 0;
};

// The source run: 2 servers x 2 workers trained with random gradients
// (a skipped step among them), checkpointed at `checkpoints` into `dir`.
class SourceRun {
 public:
  // keep_whole: every 2-D tensor stays on one server (the boundary moves).
  explicit SourceRun(bool keep_whole = false)
      : manifest_(MaybeWhole(testing::SmallManifest(kSourceWorkers),
                             keep_whole)),
        layout_(LayoutOf(manifest_, kSourceServers)) {}

  static v1::ModelManifest MaybeWhole(v1::ModelManifest m, bool keep_whole) {
    for (v1::UnitSpec& u : *m.mutable_units()) {
      for (v1::TensorSpec& t : *u.mutable_tensors()) {
        t.set_keep_whole(keep_whole && t.shape_size() == 2);
      }
    }
    return m;
  }

  // Trains and writes the checkpoints (fatal failures end the test).
  void Write(const std::string& dir, std::mt19937_64& rng,
             const std::vector<uint64_t>& checkpoints) {
    std::vector<std::unique_ptr<ModelShard>> shards;
    for (uint32_t k = 0; k < kSourceServers; ++k) {
      shards.push_back(MakeShard(manifest_, kSourceServers, k, 11, 256));
      ASSERT_NE(shards.back(), nullptr);
    }
    std::vector<std::vector<std::shared_ptr<ShardSnapshot>>> snaps;
    for (uint64_t step : checkpoints) {
      snaps.emplace_back();
      for (auto& shard : shards) {
        auto snap = shard->ArmSnapshot(step, dir);
        ASSERT_TRUE(snap.ok()) << snap.status();
        snaps.back().push_back(*snap);
      }
    }
    const uint64_t last = checkpoints.back();
    uint64_t t = 0;
    for (uint64_t step = 0; step <= last; ++step) {
      for (size_t i = 0; i < checkpoints.size(); ++i) {
        if (checkpoints[i] != step) continue;
        // Every shard is at `step` now: what the checkpoint must hold.
        Flat f;
        f.adam_t = t;
        for (auto& a : f.arrays) a.resize(layout_.total_elems());
        for (auto& shard : shards) {
          const State s = ReadState(*shard);
          for (int a = 0; a < 3; ++a) {
            std::memcpy(f.arrays[a].data() + shard->owned().begin,
                        s.arrays[a].data(), s.arrays[a].size() * 4);
          }
        }
        flats_[step] = std::move(f);
      }
      if (step == last) break;
      const bool skip = step == 1;
      if (!skip) ++t;
      for (auto& shard : shards) PushRandomStep(*shard, rng, step, skip);
    }
    for (size_t i = 0; i < checkpoints.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(Commit(dir, checkpoints[i], snaps[i]));
    }
  }

  const FlatLayout& layout() const { return layout_; }
  const Flat& at(uint64_t step) const { return flats_.at(step); }

  // What server k of `manifest` over `servers` must hold after restoring
  // step `step`: each tensor element found by name, padding zero.
  std::vector<float> Expected(const FlatLayout& target, FlatRange owned,
                              uint64_t step, int array) const {
    std::vector<float> out(owned.size(), 0.0f);
    const Flat& f = at(step);
    for (const TensorInfo& t : target.tensors()) {
      auto src = layout_.FindTensor(t.name);
      EXPECT_TRUE(src.ok()) << t.name;
      const uint64_t from = layout_.tensors()[*src].offset;
      for (uint64_t i = 0; i < t.numel; ++i) {
        const uint64_t o = t.offset + i;
        if (o >= owned.begin && o < owned.end) {
          out[o - owned.begin] = f.arrays[array][from + i];
        }
      }
    }
    return out;
  }

 private:
  void Commit(const std::string& dir, uint64_t step,
              const std::vector<std::shared_ptr<ShardSnapshot>>& snaps) {
    CheckpointManifest m;
    m.step = step;
    m.num_servers = kSourceServers;
    m.total_elems = layout_.total_elems();
    m.model_fingerprint = ModelFingerprint(layout_.manifest());
    m.model = layout_.manifest();
    for (uint32_t k = 0; k < kSourceServers; ++k) {
      absl::Notification done;
      snaps[k]->AddWaiter(
          [&](const absl::StatusOr<SnapshotResult>&) { done.Notify(); });
      ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
      const absl::StatusOr<SnapshotResult> r = *snaps[k]->result();
      ASSERT_TRUE(r.ok()) << r.status();
      CheckpointShardEntry e;
      e.server_index = k;
      e.owned = layout_.ServerRange(k);
      e.file = std::filesystem::path(r->path).filename().string();
      EXPECT_EQ(e.file, ShardFileName(k, kSourceServers));
      e.checksum = r->checksum;
      e.bytes = r->bytes;
      m.shards.push_back(e);
    }
    ASSERT_TRUE(WriteCheckpointManifest(dir, m).ok());
  }

  v1::ModelManifest manifest_;
  FlatLayout layout_;
  std::map<uint64_t, Flat> flats_;
};

// Each test: a random seed (traced on failure), its generator, and a fresh
// directory for the source run's checkpoints.
class ShardRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  const uint64_t seed_ = std::random_device{}();
  ::testing::ScopedTrace trace_{__FILE__, __LINE__,
                                absl::StrCat("seed ", seed_)};
  std::mt19937_64 rng_{seed_};
  const std::string dir_ = testing::MakeTempDir("zs_restore_");
  SourceRun run_;
};

TEST_F(ShardRestoreTest, RestoresIntoOtherServerAndWorkerCountsByTensor) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {3, 5}));

  struct Target {
    uint32_t servers, workers;
    uint64_t chunk_elems;
  };
  for (const Target& target : {Target{1, 3, 1024}, Target{3, 1, 256},
                               Target{3, 4, 512}, Target{2, 2, 256}}) {
    const v1::ModelManifest manifest = testing::SmallManifest(target.workers);
    const FlatLayout layout = LayoutOf(manifest, target.servers);
    for (const std::optional<uint64_t> step :
         {std::optional<uint64_t>(), std::optional<uint64_t>(3)}) {
      const uint64_t want_step = step.value_or(5);
      for (uint32_t k = 0; k < target.servers; ++k) {
        SCOPED_TRACE(absl::StrCat(target.servers, " servers x ",
                                  target.workers, " workers, server ", k,
                                  ", step ", want_step));
        auto shard = MakeShard(manifest, target.servers, k, rng_(),
                               target.chunk_elems);
        ASSERT_NE(shard, nullptr);
        // The target has trained a step of its own first.
        PushRandomStep(*shard, rng_, 0, false);
        auto stats = RestoreShard(*shard, dir_, step);
        ASSERT_TRUE(stats.ok()) << stats.status();
        EXPECT_EQ(stats->step, want_step);
        EXPECT_EQ(stats->adam_step, run_.at(want_step).adam_t);
        EXPECT_GE(stats->files_verified, 1u);
        const State s = ReadState(*shard);
        for (int a = 0; a < 3; ++a) {
          EXPECT_EQ(FirstDifference(
                        s.arrays[a],
                        run_.Expected(layout, shard->owned(), want_step, a)),
                    SIZE_MAX)
              << kArrayNames[a]
              << " differs at this element of the owned range";
        }
        for (size_t c = 0; c < s.versions.size(); ++c) {
          EXPECT_EQ(s.versions[c], want_step) << c;
          EXPECT_EQ(s.adam_t[c], run_.at(want_step).adam_t) << c;
        }
        // The BF16 mirror follows the restored master.
        const FlatRange owned = shard->owned();
        std::vector<uint16_t> mirror(owned.size());
        for (size_t c = 0; c < shard->store().num_chunks(); ++c) {
          const FlatRange r = shard->store().ChunkRange(c);
          ASSERT_TRUE(shard->store()
                          .Read(r, DType::kBf16,
                                mirror.data() + (r.begin - owned.begin))
                          .ok());
        }
        for (size_t i = 0; i < owned.size(); ++i) {
          if (mirror[i] != FloatToBf16(s.arrays[0][i])) {
            ADD_FAILURE() << "mirror differs at " << owned.begin + i;
            break;
          }
        }
        // Training goes on from the restored step.
        PushRandomStep(*shard, rng_, want_step, false);
        EXPECT_EQ(shard->tracker().Summarize().min_version, want_step + 1);
      }
    }
  }
}

// A checkpoint of a layout whose server boundary was moved off a whole
// tensor restores by tensor into even layouts and back; a manifest whose
// recorded boundaries are not its model's is refused.
TEST_F(ShardRestoreTest, WholeTensorLayoutsRestoreByTensor) {
  SourceRun whole(/*keep_whole=*/true);
  ASSERT_NE(whole.layout().ServerRange(0), run_.layout().ServerRange(0))
      << "the control: the whole-tensor boundary must differ from the even one";
  ASSERT_NO_FATAL_FAILURE(whole.Write(dir_, rng_, {3}));
  for (const bool target_whole : {false, true}) {
    for (const uint32_t servers : {1u, 2u, 3u}) {
      const v1::ModelManifest manifest =
          SourceRun::MaybeWhole(testing::SmallManifest(3), target_whole);
      const FlatLayout layout = LayoutOf(manifest, servers);
      for (uint32_t k = 0; k < servers; ++k) {
        SCOPED_TRACE(absl::StrCat(servers, " servers, whole ", target_whole,
                                  ", server ", k));
        auto shard = MakeShard(manifest, servers, k, rng_(), 256);
        ASSERT_NE(shard, nullptr);
        auto stats = RestoreShard(*shard, dir_, std::nullopt);
        ASSERT_TRUE(stats.ok()) << stats.status();
        const State st = ReadState(*shard);
        for (int a = 0; a < 3; ++a) {
          EXPECT_EQ(FirstDifference(st.arrays[a],
                                    whole.Expected(layout, shard->owned(), 3, a)),
                    SIZE_MAX)
              << kArrayNames[a];
        }
      }
    }
  }
  // The manifest's model loses its marks: its layout's boundary is the even
  // one, not the one the shard files were cut at.
  const std::string path =
      absl::StrCat(dir_, "/", CheckpointFolderName(3), "/MANIFEST.json");
  std::string text = testing::ReadFile(path);
  ASSERT_NE(text.find("\"keep_whole\""), std::string::npos);
  const std::string mark = "\"keep_whole\": true,";  // keys sort first
  for (size_t at; (at = text.find(mark)) != std::string::npos;) {
    text.erase(at, mark.size());
  }
  ASSERT_EQ(text.find("keep_whole"), std::string::npos) << text;
  ASSERT_TRUE(testing::WriteFile(path, text));
  auto shard = MakeShard(testing::SmallManifest(3), 1, 0, 5, 1024);
  ASSERT_NE(shard, nullptr);
  const State before = ReadState(*shard);
  auto stats = RestoreShard(*shard, dir_, std::nullopt);
  ASSERT_FALSE(stats.ok());
  EXPECT_TRUE(absl::IsDataLoss(stats.status())) << stats.status();
  EXPECT_NE(stats.status().message().find(absl::StrCat(
                "records server 0 owning [0, ", whole.layout().ServerRange(0).end,
                "), but its model's layout gives [0, ",
                run_.layout().ServerRange(0).end, ")")),
            std::string::npos)
      << stats.status();
  EXPECT_TRUE(ReadState(*shard) == before) << "the target shard changed";
}

TEST_F(ShardRestoreTest, DamagedFilesAreNamedAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {1, 2}));
  // One target server over the whole flat space reads both files.
  const v1::ModelManifest manifest = testing::SmallManifest(3);
  auto shard = MakeShard(manifest, 1, 0, 5, 1024);
  ASSERT_NE(shard, nullptr);
  PushRandomStep(*shard, rng_, 0, false);
  const State before = ReadState(*shard);

  const uint32_t k = rng_() % kSourceServers;
  const std::string name = ShardFileName(k, kSourceServers);
  const std::string path =
      absl::StrCat(dir_, "/", CheckpointFolderName(2), "/", name);
  const std::string good = testing::ReadFile(path);
  ASSERT_FALSE(good.empty());
  enum Damage { kFlip, kTruncate, kMissing };
  for (Damage d : {kFlip, kTruncate, kMissing}) {
    SCOPED_TRACE(absl::StrCat("damage ", d, " to ", name));
    if (d == kMissing) {
      ASSERT_TRUE(std::filesystem::remove(path));
    } else {
      std::string bad = good;
      if (d == kFlip) {
        bad[rng_() % bad.size()] ^= static_cast<char>(1 + rng_() % 255);
      } else {
        bad.resize(rng_() % bad.size());
      }
      ASSERT_TRUE(testing::WriteFile(path, bad));
    }
    auto stats = RestoreShard(*shard, dir_, std::nullopt);
    ASSERT_FALSE(stats.ok());
    if (d == kMissing) {
      EXPECT_TRUE(absl::IsNotFound(stats.status()) ||
                  absl::IsDataLoss(stats.status()))
          << stats.status();
    } else {
      EXPECT_TRUE(absl::IsDataLoss(stats.status())) << stats.status();
    }
    EXPECT_NE(stats.status().message().find(name), std::string::npos)
        << stats.status();
    // The newest is damaged: the older complete checkpoints are named.
    if (absl::IsDataLoss(stats.status())) {
      EXPECT_NE(stats.status().message().find(absl::StrCat(
                    "older complete checkpoints in ", dir_, ": steps 1 ")),
                std::string::npos)
          << stats.status();
    }
    EXPECT_TRUE(ReadState(*shard) == before) << "the target shard changed";
    ASSERT_TRUE(testing::WriteFile(path, good));
  }
  // Repaired: it restores.
  auto stats = RestoreShard(*shard, dir_, std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->files_verified, 2u);
  EXPECT_EQ(shard->tracker().Summarize().max_version, 2u);
}

// A shard file that is whole and valid on its own, of the same model, step,
// server and owned range, but from another run: only the manifest's
// checksum tells it apart, and the restore refuses it.
TEST_F(ShardRestoreTest, AValidFileThatIsNotTheManifestsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {2}));
  const std::string other_dir = testing::MakeTempDir("zs_restore_other_");
  SourceRun other;
  ASSERT_NO_FATAL_FAILURE(other.Write(other_dir, rng_, {2}));
  const uint32_t k = rng_() % kSourceServers;
  const std::string name = ShardFileName(k, kSourceServers);
  const std::string folder = absl::StrCat("/", CheckpointFolderName(2), "/");
  const std::string mine = testing::ReadFile(dir_ + folder + name);
  const std::string theirs = testing::ReadFile(other_dir + folder + name);
  ASSERT_EQ(mine.size(), theirs.size());
  ASSERT_NE(mine, theirs);
  ASSERT_TRUE(testing::WriteFile(dir_ + folder + name, theirs));
  auto shard = MakeShard(testing::SmallManifest(3), 1, 0, 5, 1024);
  ASSERT_NE(shard, nullptr);
  const State before = ReadState(*shard);
  auto stats = RestoreShard(*shard, dir_, std::nullopt);
  ASSERT_TRUE(absl::IsDataLoss(stats.status())) << stats.status();
  EXPECT_NE(stats.status().message().find(name), std::string::npos)
      << stats.status();
  EXPECT_NE(stats.status().message().find("is not the manifest's"),
            std::string::npos)
      << stats.status();
  EXPECT_TRUE(ReadState(*shard) == before) << "the target shard changed";
  // Its own file back: it restores.
  ASSERT_TRUE(testing::WriteFile(dir_ + folder + name, mine));
  EXPECT_TRUE(RestoreShard(*shard, dir_, std::nullopt).ok());
}

TEST_F(ShardRestoreTest, RefusesOtherModelsOptimizersStepsAndBusyShards) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {2, 4}));

  auto expect_refused = [&](ModelShard& shard, std::optional<uint64_t> step,
                            absl::StatusCode code, const std::string& text) {
    const State before = ReadState(shard);
    auto stats = RestoreShard(shard, dir_, step);
    EXPECT_EQ(stats.status().code(), code) << stats.status();
    EXPECT_NE(stats.status().message().find(text), std::string::npos)
        << stats.status();
    EXPECT_TRUE(ReadState(shard) == before) << "the target shard changed";
  };

  // Another model: one tensor of another shape.
  {
    v1::ModelManifest other = testing::SmallManifest(2);
    other.mutable_units(0)->mutable_tensors(1)->set_shape(0, 17);
    auto shard = MakeShard(other, 2, 1, 3, 256);
    ASSERT_NE(shard, nullptr);
    expect_refused(*shard, std::nullopt, absl::StatusCode::kFailedPrecondition,
                   "another model");
  }
  // Another optimizer configuration.
  {
    v1::InitRequest init =
        testing::MakeInit(testing::SmallManifest(2), 2, 0, 3, 256);
    init.mutable_optimizer()->set_lr(init.optimizer().lr() * 2);
    auto shard = ModelShard::Create(init, {0, 2}, Placement::kHost);
    ASSERT_TRUE(shard.ok()) << shard.status();
    // The one field that differs is named as the config file names it,
    // with both values.
    expect_refused(**shard, std::nullopt,
                   absl::StatusCode::kFailedPrecondition,
                   absl::StrCat("checkpoint -> now: optimizer.params.lr: ",
                                init.optimizer().lr() / 2, " -> ",
                                init.optimizer().lr(), ")"));
  }
  // Another rule (the same two slots): the file's optimizer.type, as it
  // spells the types.
  {
    v1::InitRequest init =
        testing::MakeInit(testing::SmallManifest(2), 2, 0, 3, 256);
    init.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAM);
    auto shard = ModelShard::Create(init, {0, 2}, Placement::kHost);
    ASSERT_TRUE(shard.ok()) << shard.status();
    expect_refused(**shard, std::nullopt,
                   absl::StatusCode::kFailedPrecondition,
                   "checkpoint -> now: optimizer.type: AdamW -> Adam");
  }
  // Another warmup: the checkpoint's run had the linear warmup from 0 (its
  // Init predates the warmup fields).
  for (int k = 0; k < 2; ++k) {
    v1::InitRequest init =
        testing::MakeInit(testing::SmallManifest(2), 2, 0, 3, 256);
    v1::LrSchedule* s = init.mutable_optimizer()->mutable_schedule();
    if (k == 0) s->set_warmup_type(v1::LrSchedule::WARMUP_TYPE_LOG);
    if (k == 1) s->set_warmup_start_lr(1e-4);
    auto shard = ModelShard::Create(init, {0, 2}, Placement::kHost);
    ASSERT_TRUE(shard.ok()) << shard.status();
    expect_refused(**shard, std::nullopt,
                   absl::StatusCode::kFailedPrecondition, "optimizer");
  }
  {
    v1::InitRequest init =
        testing::MakeInit(testing::SmallManifest(2), 2, 0, 3, 256);
    absl::StatusOr<FlatLayout> layout =
        FlatLayout::Create(FromProto(init.manifest()), 2, 1);
    ASSERT_TRUE(layout.ok()) << layout.status();
    AddParamGroups(ResolveParamGroups(*layout, ParamGroups(),
                                      init.optimizer().weight_decay()),
                   init.mutable_optimizer());
    auto shard = ModelShard::Create(init, {0, 2}, Placement::kHost);
    ASSERT_TRUE(shard.ok()) << shard.status();
    expect_refused(**shard, std::nullopt,
                   absl::StatusCode::kFailedPrecondition,
                   "zeroshard.param_groups");
  }
  auto shard = MakeShard(testing::SmallManifest(1), 3, 1, 3, 256);
  ASSERT_NE(shard, nullptr);
  // A step that is not there: the complete ones are listed.
  const uint64_t missing = 5 + rng_() % 1000;
  expect_refused(*shard, missing, absl::StatusCode::kNotFound,
                 "complete ones: 2, 4");
  // A folder without a manifest is not a checkpoint.
  std::filesystem::create_directories(dir_ + "/" + CheckpointFolderName(9));
  expect_refused(*shard, 9, absl::StatusCode::kNotFound, "complete ones: 2, 4");
  // Part of a step applied.
  const FlatRange part{shard->owned().begin, shard->owned().begin + 10};
  std::vector<float> grad(10, 1.0f);
  const GradPiece piece{part, DType::kFp32, grad.data()};
  ASSERT_TRUE(shard->ApplyPush(0, {1.0, false}, {&piece, 1}).ok());
  expect_refused(*shard, std::nullopt, absl::StatusCode::kFailedPrecondition,
                 "partly applied");
  // A snapshot armed.
  auto other = MakeShard(testing::SmallManifest(1), 3, 2, 3, 256);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->ArmSnapshot(3, "").ok());
  expect_refused(*other, std::nullopt, absl::StatusCode::kFailedPrecondition,
                 "snapshot");
  // An empty directory.
  const std::string empty = testing::MakeTempDir("zs_restore_empty_");
  auto fresh = MakeShard(testing::SmallManifest(1), 3, 0, 3, 256);
  ASSERT_NE(fresh, nullptr);
  auto none = RestoreShard(*fresh, empty, std::nullopt);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
}

// A checkpoint whose Init had no warmup fields (written before they existed:
// proto3 leaves them out) resumes under an Init that states their defaults,
// a linear warmup from 0; the schedule converts both ways, the new fields
// too.
TEST_F(ShardRestoreTest, CheckpointsWithoutWarmupFieldsResumeAsLinearFromZero) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {2}));
  v1::InitRequest init = testing::MakeInit(testing::SmallManifest(1), 3, 1, 3, 256);
  v1::LrSchedule* s = init.mutable_optimizer()->mutable_schedule();
  s->set_warmup_type(v1::LrSchedule::WARMUP_TYPE_LINEAR);
  s->set_warmup_start_lr(0.0);
  absl::StatusOr<OptimizerConfig> was = FromProto(init.optimizer());
  ASSERT_TRUE(was.ok()) << was.status();
  EXPECT_EQ(was->warmup_type, WarmupType::kLinear);
  EXPECT_EQ(was->warmup_start_lr, 0.0);
  auto shard = ModelShard::Create(init, {1, 3}, Placement::kHost);
  ASSERT_TRUE(shard.ok()) << shard.status();
  auto stats = RestoreShard(**shard, dir_, std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->step, 2u);

  OptimizerConfig log;
  log.schedule = LrScheduleKind::kWarmupLinear;
  log.warmup_steps = 10;
  log.total_steps = 50;
  log.min_lr = 1e-5;
  log.warmup_type = WarmupType::kLog;
  log.warmup_start_lr = 2e-5;
  absl::StatusOr<OptimizerConfig> back = FromProto(ToProto(log));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, log);
  v1::OptimizerConfig bad = ToProto(log);
  bad.mutable_schedule()->set_warmup_type(static_cast<v1::LrSchedule::WarmupType>(9));
  EXPECT_FALSE(FromProto(bad).ok());
}

// A run extended past its end: the schedule's total_steps differs from the
// checkpoint's, and so may its warmup (one shortened to fit the short run
// regains its configured length); the restore goes on (the resuming Init's
// schedule rules from here); any other schedule field still refuses.
TEST_F(ShardRestoreTest, AnExtendedScheduleResumes) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {2}));
  v1::InitRequest init = testing::MakeInit(testing::SmallManifest(1), 3, 1, 3, 256);
  v1::LrSchedule* s = init.mutable_optimizer()->mutable_schedule();
  s->set_total_steps(s->total_steps() + 1 + rng_() % 1000);
  s->set_warmup_steps(std::min<uint64_t>(
      s->total_steps(), s->warmup_steps() + 1 + rng_() % 7));
  auto shard = ModelShard::Create(init, {1, 3}, Placement::kHost);
  ASSERT_TRUE(shard.ok()) << shard.status();
  auto stats = RestoreShard(**shard, dir_, std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->step, 2u);

  s->set_min_lr(s->min_lr() + 1e-6);
  auto other = ModelShard::Create(init, {1, 3}, Placement::kHost);
  ASSERT_TRUE(other.ok()) << other.status();
  auto refused = RestoreShard(**other, dir_, std::nullopt);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("the scheduler's final lr"),
            std::string::npos)
      << refused.status();
}

TEST_F(ShardRestoreTest, ATargetThatOwnsNothingTakesTheStepAndAdamCount) {
  ASSERT_NO_FATAL_FAILURE(run_.Write(dir_, rng_, {3}));
  // Server 0 of 1000 owns an empty range: nothing to read, but one file
  // still tells the Adam step count.
  auto shard = MakeShard(testing::SmallManifest(1), 1000, 0, 1, 256);
  ASSERT_NE(shard, nullptr);
  ASSERT_TRUE(shard->owned().empty());
  auto stats = RestoreShard(*shard, dir_, std::nullopt);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->step, 3u);
  EXPECT_EQ(stats->adam_step, run_.at(3).adam_t);
  EXPECT_EQ(stats->files_verified, 1u);
}

}  // namespace
}  // namespace zeroshard
