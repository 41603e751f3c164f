// The step log (server/step_log.h): a copy that logs what it applies from
// step s on, replayed in its order into a copy restored at version s, gives
// the logging copy's state bit for bit, with pushes of several pieces, FP32
// and BF16, skipped steps, pushes that are partly duplicates, and pushes
// applied from two threads at once. The log's bounds and refusals.
#include "server/step_log.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/model_shard.h"
#include "tests/server/shard_state_util.h"

namespace zeroshard {
namespace {

// One random push of `step` over `pieces` of the owned range.
struct StepLogPush {
  std::vector<std::shared_ptr<std::vector<char>>> data;
  std::vector<GradPiece> pieces;
};

StepLogPush RandomStepLogPush(std::mt19937_64& rng,
                              const std::vector<FlatRange>& ranges) {
  StepLogPush p;
  for (const FlatRange& r : ranges) {
    const DType dtype = rng() % 2 == 0 ? DType::kFp32 : DType::kBf16;
    p.data.push_back(testing::RandomBytes(rng, r, dtype));
    p.pieces.push_back({r, dtype, p.data.back()->data()});
  }
  return p;
}

void ApplyStepLogPush(ModelShard& shard, uint64_t step,
                      const StepParams& params, const StepLogPush& push) {
  absl::StatusOr<ApplyResult> r = shard.ApplyPush(step, params, push.pieces);
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST(StepLogTest, AReplayOfTheLogGivesTheLoggingCopysBits) {
  const uint64_t seed = std::random_device()();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::unique_ptr<ModelShard> logging = testing::MakeTestShard(3);
  std::unique_ptr<ModelShard> replica = testing::MakeTestShard(3);
  ASSERT_NE(logging, nullptr);
  ASSERT_NE(replica, nullptr);
  const FlatRange own = logging->owned();
  // Step 0 on both: where the replica "was restored".
  const StepLogPush first =
      RandomStepLogPush(rng, testing::RandomTiling(rng, own, 3));
  ApplyStepLogPush(*logging, 0, {}, first);
  ApplyStepLogPush(*replica, 0, {}, first);
  EXPECT_EQ(logging->OpenStepLog(0).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(logging->OpenStepLog(1).ok());
  for (uint64_t step = 1; step <= 4; ++step) {
    StepParams params{.coefficient = 0.25 * step, .skip = step == 3};
    const std::vector<FlatRange> tiles = testing::RandomTiling(rng, own, 5);
    // Two pushes of the step's pieces, applied from two threads at once.
    std::vector<FlatRange> a, b;
    for (size_t i = 0; i < tiles.size(); ++i) {
      (i % 2 == 0 ? a : b).push_back(tiles[i]);
    }
    const StepLogPush pa = RandomStepLogPush(rng, a),
                      pb = RandomStepLogPush(rng, b);
    std::thread other([&] { ApplyStepLogPush(*logging, step, params, pb); });
    ApplyStepLogPush(*logging, step, params, pa);
    other.join();
    // A push repeated (a retried stream): duplicates, logged again.
    ApplyStepLogPush(*logging, step, params, pa);
  }
  ASSERT_NE(logging->step_log_bytes(), 0u);
  absl::StatusOr<std::vector<std::shared_ptr<const LoggedPush>>> log =
      logging->ReadStepLog(1);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_FALSE(log->empty());
  EXPECT_EQ(log->front()->step, 1u);
  EXPECT_NE(
      testing::Diff(testing::ReadState(*replica), testing::ReadState(*logging)),
      "");
  for (const auto& p : *log) {
    absl::StatusOr<ApplyResult> r =
        replica->ApplyPush(p->step, p->params, p->pieces, p->attempt);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(
      testing::Diff(testing::ReadState(*replica), testing::ReadState(*logging)),
      "");
  // Read from a later step: the earlier pushes are dropped for good.
  log = logging->ReadStepLog(4);
  ASSERT_TRUE(log.ok()) << log.status();
  for (const auto& p : *log) EXPECT_EQ(p->step, 4u);
  EXPECT_EQ(logging->ReadStepLog(2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  logging->CloseStepLog();
  EXPECT_EQ(logging->step_log_bytes(), 0u);
  EXPECT_EQ(logging->ReadStepLog(4).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(StepLogTest, ALogPastItsBoundIsDroppedWholeAndSaysSo) {
  StepLog log(/*max_bytes=*/64);
  std::vector<float> g(8, 1.0f);  // 32 bytes a push
  const GradPiece piece{{0, 8}, DType::kFp32, g.data()};
  log.Record(0, 0, {}, {&piece, 1});  // not open: not kept
  EXPECT_EQ(log.bytes(), 0u);
  log.Open(2);
  log.Record(1, 0, {}, {&piece, 1});  // before its first step
  EXPECT_EQ(log.bytes(), 0u);
  log.Record(2, 0, {}, {&piece, 1});
  log.Record(3, 0, {}, {&piece, 1});
  EXPECT_EQ(log.bytes(), 64u);
  absl::StatusOr<std::vector<std::shared_ptr<const LoggedPush>>> read =
      log.Read(2);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  g[0] = 7.0f;  // the log keeps its own copy
  float kept;
  std::memcpy(&kept, (*read)[0]->pieces[0].data, sizeof(kept));
  EXPECT_EQ(kept, 1.0f);
  log.Record(4, 0, {}, {&piece, 1});
  read = log.Read(2);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(read.status().message().find("outgrew its bound of 64 bytes"),
            std::string::npos)
      << read.status();
  EXPECT_EQ(log.bytes(), 0u);
  log.Open(5);  // opened again: empty, readable
  read = log.Read(5);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

}  // namespace
}  // namespace zeroshard
