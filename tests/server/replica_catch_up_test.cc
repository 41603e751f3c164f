// A replacement catches up while training goes on (docs/DESIGN.md,
// "Replicas"): the other copies of its slots log the pushes they apply
// (StepLog), it is restored from a checkpoint and replays them (Replay),
// through the client calls (client/catch_up.h) and through the catch-ups
// both trainers run (client/replica_catch_ups.h).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/replica_catch_ups.h"
#include "gtest/gtest.h"
#include "tests/server/replica_fixture.h"

namespace zeroshard::testing {
namespace {

// A replacement catches up while the steps go on: the other copies of its
// slots log what they apply from the checkpoint's step, and the
// replacement, restored from that checkpoint, applies the same pushes
// (two-phase and pieces applied as they arrive) and ends bit-identical.
TEST_F(ReplicaRpcTest, AReplacementCatchesUpFromTheLogsWhileStepsGoOn) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  // The same steps on one copy of fresh servers, side by side.
  std::unique_ptr<ShardCluster> ref = FreshOneCopy();
  ASSERT_NE(ref, nullptr);
  std::vector<float> g(layout_->total_elems(), 0.04f);
  const GradSpan all{FlatRange{0, g.size()}, DType::kFp32, g.data()};
  // Step 3's pieces are applied as they arrive, with coefficient 0.5.
  auto step = [&](ShardCluster& c, uint64_t s) {
    if (s != 3) return Step(c, s, 0.01f * static_cast<float>(s + 1));
    return c.PushGrad(3, 0, {all}, StepCommit{.coefficient = 0.5}, true)
        .status();
  };
  // The tensors' elements: these steps push into the units' padding too,
  // which a restore does not carry (a worker's gradient there is zero).
  auto tensors = [&](ShardCluster& c) {
    std::vector<float> w = All(c);
    for (const UnitInfo& u : layout_->units()) {
      std::fill(w.begin() + u.offset + u.numel, w.begin() + u.offset + u.padded,
                0.0f);
    }
    return w;
  };
  auto both = [&](uint64_t s) {
    ASSERT_TRUE(step(*two, s).ok());
    ASSERT_TRUE(step(*ref, s).ok());
    ASSERT_EQ(tensors(*two), tensors(*ref)) << "after step " << s;
  };
  both(0);
  const int port = servers_[2].server->port();
  servers_[2].server.reset();
  both(1);
  ASSERT_TRUE(two->ServerGone(2));
  ASSERT_TRUE(StartFreshServer(*two, 2, port));

  // A log from a step some copy has applied would miss pushes.
  absl::Status s = two->OpenStepLogs(2, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("applied some of step 1"), std::string::npos) << s;
  // Before step 2: logs from 2 and a checkpoint of 2; the steps go on.
  ASSERT_TRUE(two->OpenStepLogs(2, 2).ok());
  const std::string dir = ::testing::TempDir() + "/catch_up_ckpt";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(two->ArmCheckpoint(2, dir).ok());
  both(2);
  both(3);
  CommitArmed(*two, 2, dir);
  ASSERT_TRUE(two->RestoreServer(2, TwoCopyInit(), dir, 2).ok());
  EXPECT_TRUE(two->ServerGone(2));  // restored, not yet written by steps
  absl::StatusOr<uint64_t> v = two->ReplayStepLogs(2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 4u);
  both(4);
  v = two->ReplayStepLogs(2);  // the step boundary's last replay
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 5u);
  two->CloseStepLogs(2);
  two->MarkServerBack(2);
  s = two->CheckCopiesAgree();
  EXPECT_TRUE(s.ok()) << s;
  both(5);  // slot 2 read from its replacement
  s = two->CheckCopiesAgree();
  EXPECT_TRUE(s.ok()) << s;
  // A log closed is not read.
  s = two->ReplayStepLogs(2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("no log is open"), std::string::npos) << s;

  // A replayed push the copy cannot take changes nothing: another run,
  // a range outside the slot, a step the copy does not stand at.
  const FlatRange r = layout_->ServerRange(2);
  auto replay = [&](const std::string& run, uint64_t step, uint64_t offset) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, 20000);
    ctx.AddMetadata(kCopiesMetadataKey, "2");
    v1::ReplayResponse reply;
    auto writer = servers_[2].stub->Replay(&ctx, &reply);
    v1::PushGradMessage m;
    v1::PushGradHeader* h = m.mutable_header();
    h->set_step(step);
    h->set_run_id(run);
    h->set_coefficient_known(true);
    h->set_coefficient(1.0);
    writer->Write(m);
    m.Clear();
    const float x = 1.0f;
    m.mutable_piece()->set_offset(offset);
    m.mutable_piece()->set_dtype(v1::DTYPE_FP32);
    m.mutable_piece()->set_data(
        std::string(reinterpret_cast<const char*>(&x), sizeof(x)));
    writer->Write(m);
    writer->WritesDone();
    return writer->Finish();
  };
  grpc::Status refused = replay("another-run", 6, r.begin);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  refused = replay(kTestRunId, 6, r.end);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  refused = replay(kTestRunId, 9, r.begin);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.error_message().find("Replay: the push of step 9"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(tensors(*two), tensors(*ref));
  s = two->CheckCopiesAgree();
  EXPECT_TRUE(s.ok()) << s;
  std::filesystem::remove_all(dir);
}

// The catch-ups both trainers run: one started between steps ends, at a
// later step once its thread is done, with the server back and its copies
// equal to the others; one that cannot start (a log from a step already
// applied) or whose server dies while it runs is counted as failed and
// changes nothing the run reads.
TEST_F(ReplicaRpcTest, CatchUpsBringAServerBackAndCountWhatFails) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  uint64_t step = 0;
  ASSERT_TRUE(Step(*two, step++, 0.01f).ok());
  const int port = servers_[2].server->port();
  auto restart = [&] { ASSERT_TRUE(StartFreshServer(*two, 2, port)); };
  servers_[2].server.reset();
  ASSERT_TRUE(Step(*two, step++, 0.02f).ok());
  ASSERT_TRUE(two->ServerGone(2));
  restart();
  const std::string dir = ::testing::TempDir() + "/catch_ups";
  std::filesystem::remove_all(dir);
  ReplicaCatchUps catch_ups(two.get(), TwoCopyInit(), dir, absl::Seconds(20));
  EXPECT_EQ(catch_ups.Start(2, step - 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(catch_ups.Failures(2), 1);
  EXPECT_FALSE(catch_ups.Busy(2));
  ASSERT_TRUE(catch_ups.Start(2, step).ok());
  EXPECT_TRUE(catch_ups.Busy(2));
  // Steps go on until the catch-up ends (its thread takes well under a
  // second here; bounded at 20 s).
  ReplicaCatchUps::Ended ended;
  for (const absl::Time end = absl::Now() + absl::Seconds(20);
       ended.back.empty() && ended.failed.empty() && absl::Now() < end;) {
    ASSERT_TRUE(Step(*two, step++, 0.03f).ok());
    absl::SleepFor(absl::Milliseconds(20));
    ended = catch_ups.Finish(step);
  }
  ASSERT_EQ(ended.back, std::vector<int>{2});
  EXPECT_TRUE(ended.failed.empty());
  EXPECT_EQ(catch_ups.Failures(2), 0);
  EXPECT_FALSE(two->ServerGone(2));
  absl::Status s = two->CheckCopiesAgree();
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_TRUE(Step(*two, step++, 0.05f).ok());
  s = two->CheckCopiesAgree();
  EXPECT_TRUE(s.ok()) << s;

  // The server dies again, and its replacement dies while catching up.
  servers_[2].server.reset();
  ASSERT_TRUE(Step(*two, step++, 0.06f).ok());
  restart();
  ASSERT_TRUE(catch_ups.Start(2, step).ok());
  servers_[2].server.reset();
  ended = {};
  for (const absl::Time end = absl::Now() + absl::Seconds(30);
       ended.back.empty() && ended.failed.empty() && absl::Now() < end;) {
    ASSERT_TRUE(Step(*two, step++, 0.07f).ok());
    absl::SleepFor(absl::Milliseconds(20));
    ended = catch_ups.Finish(step);
  }
  EXPECT_TRUE(ended.back.empty());
  EXPECT_EQ(ended.failed, std::vector<int>{2});
  EXPECT_EQ(catch_ups.Failures(2), 1);
  catch_ups.ForgetFailures(2);
  EXPECT_EQ(catch_ups.Failures(2), 0);
  EXPECT_TRUE(two->ServerGone(2));
  s = two->CheckCopiesAgree();
  EXPECT_TRUE(s.ok()) << s;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zeroshard::testing
