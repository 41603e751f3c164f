// The Checkpoint and Restore calls over gRPC (their authorization is in
// tests/server/authorization_test.cc): wait = true
// returning the written file once the step is reached, a deadline ending
// the call while the snapshot goes on, arming a passed step refused, and a
// restore of the written checkpoint after training went on.
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_manifest.h"
#include "gtest/gtest.h"
#include "server/shard_checkpoint.h"
#include "tests/server/server_test_util.h"
#include "tests/support/test_files.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

using testing::GatherFp32;
using testing::Header;
using testing::Push;
using testing::SetDeadline;

grpc::Status Checkpoint(v1::ShardService::Stub& stub, uint64_t step,
                        const std::string& dir, bool wait, int deadline_ms,
                        v1::CheckpointResponse* response) {
  grpc::ClientContext c;
  SetDeadline(c, deadline_ms);
  v1::CheckpointRequest req;
  req.set_step(step);
  req.set_directory(dir);
  req.set_wait(wait);
  return stub.Checkpoint(&c, req, response);
}

grpc::Status Restore(v1::ShardService::Stub& stub, const std::string& dir,
                     std::optional<uint64_t> step,
                     v1::RestoreResponse* response) {
  grpc::ClientContext c;
  SetDeadline(c, 20000);
  v1::RestoreRequest req;
  req.set_directory(dir);
  if (step.has_value()) req.set_step(*step);
  return stub.Restore(&c, req, response);
}

// Pushes one step of random FP32 gradient over `owned`, zero on padding
// (as workers push), so padding stays zero and a restore gives it back.
void PushStep(v1::ShardService::Stub& stub, std::mt19937& rng, uint64_t step,
              const FlatLayout& layout, FlatRange owned) {
  std::normal_distribution<float> g(0, 1);
  std::vector<float> grad(owned.size(), 0.0f);
  for (const TensorInfo& t : layout.tensors()) {
    for (uint64_t i = 0; i < t.numel; ++i) grad[t.offset + i] = g(rng);
  }
  v1::PushGradResponse resp;
  const grpc::Status s = Push(stub, Header(step), {testing::Fp32Piece(
                                                      owned.begin, grad)},
                              0.5, false, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.applied_elems(), owned.size());
}

TEST(CheckpointRpcTest, WaitDeadlinePassedStepsAndRestoreRoundTrip) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const v1::ModelManifest manifest = testing::SmallManifest(1);
  auto layout = FlatLayout::Create(FromProto(manifest), 1, 1);
  ASSERT_TRUE(layout.ok());
  const FlatRange owned{0, layout->total_elems()};
  testing::TestServer t = testing::StartServer(0, 1);
  ASSERT_NE(t.stub, nullptr);
  v1::InitRequest init = testing::MakeInit(manifest, 1, 0, seed, 1024);
  ASSERT_TRUE(testing::InitServer(*t.stub, init).ok());
  const std::string dir = testing::MakeTempDir("zs_ckpt_rpc_");
  ASSERT_FALSE(dir.empty());

  v1::CheckpointResponse resp;

  // A deadline before the step is reached ends the call; the snapshot is
  // armed and goes on.
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status s = Checkpoint(*t.stub, 2, dir, true, 300, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  s = Checkpoint(*t.stub, 2, dir, false, 20000, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(resp.done());
  EXPECT_EQ(resp.step(), 2u);
  EXPECT_EQ(resp.owned().offset(), owned.begin);
  EXPECT_EQ(resp.owned().length(), owned.size());

  // wait = true returns once steps 0 and 1 are applied and the file is
  // written.
  v1::CheckpointResponse waited;
  grpc::Status waited_status;
  std::thread waiter([&] {
    waited_status = Checkpoint(*t.stub, 2, dir, true, 60000, &waited);
  });
  PushStep(*t.stub, rng, 0, *layout, owned);
  PushStep(*t.stub, rng, 1, *layout, owned);
  const std::vector<float> at2 = GatherFp32(*t.stub, owned);
  waiter.join();
  ASSERT_TRUE(waited_status.ok()) << waited_status.error_message();
  EXPECT_TRUE(waited.done());
  EXPECT_EQ(waited.step(), 2u);
  EXPECT_EQ(waited.path(), absl::StrCat(dir, "/", CheckpointFolderName(2), "/",
                                        ShardFileName(0, 1)));
  auto info = VerifyShardCheckpoint(waited.path());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->checksum, waited.checksum());
  EXPECT_EQ(info->file_bytes, waited.bytes());
  EXPECT_EQ(info->header.step(), 2u);
  std::vector<float> master(owned.size());
  ASSERT_TRUE(ReadShardCheckpointRange(waited.path(), *info,
                                       /*master=*/0, owned,
                                       master.data())
                  .ok());
  EXPECT_EQ(std::memcmp(master.data(), at2.data(), at2.size() * 4), 0);
  // Asking again: done at once, the same file.
  s = Checkpoint(*t.stub, 2, dir, false, 20000, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(resp.done());
  EXPECT_EQ(resp.checksum(), waited.checksum());

  // A step already passed cannot be snapshot.
  s = Checkpoint(*t.stub, 1, dir, true, 20000, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();

  // Commit the checkpoint, train on, and restore it.
  CheckpointManifest m;
  m.step = 2;
  m.num_servers = 1;
  m.total_elems = layout->total_elems();
  m.model_fingerprint = ModelFingerprint(layout->manifest());
  m.model = layout->manifest();
  m.shards.push_back({0, owned, ShardFileName(0, 1), waited.checksum(),
                      waited.bytes()});
  ASSERT_TRUE(WriteCheckpointManifest(dir, m).ok());
  PushStep(*t.stub, rng, 2, *layout, owned);
  ASSERT_NE(GatherFp32(*t.stub, owned), at2);
  v1::RestoreResponse restored;
  s = Restore(*t.stub, dir, 7, &restored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  s = Restore(*t.stub, dir, std::nullopt, &restored);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(restored.version(), 2u);
  EXPECT_EQ(restored.adam_step(), 2u);
  EXPECT_EQ(restored.files_verified(), 1u);
  const std::vector<float> back = GatherFp32(*t.stub, owned);
  ASSERT_EQ(back.size(), at2.size());
  size_t differ = 0, first = SIZE_MAX;
  for (size_t i = 0; i < back.size(); ++i) {
    if (std::memcmp(&back[i], &at2[i], 4) != 0) {
      ++differ;
      if (first == SIZE_MAX) first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << "the restored master differs at " << differ
                        << " elements, the first at " << first;
  const v1::InspectResponse inspect = testing::Inspect(*t.stub);
  EXPECT_EQ(inspect.min_version(), 2u);
  EXPECT_EQ(inspect.max_version(), 2u);
  // Training goes on from step 2; a snapshot armed ahead blocks a restore.
  PushStep(*t.stub, rng, 2, *layout, owned);
  s = Checkpoint(*t.stub, 5, dir, false, 20000, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = Restore(*t.stub, dir, 2, &restored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();
  // A file that cannot be written: wait = true returns the write's error,
  // naming the folder, and so does asking again.
  ASSERT_TRUE(testing::WriteFile(dir + "/a-file", "x"));
  const std::string unwritable = dir + "/a-file/below";
  for (bool wait : {true, false}) {
    s = Checkpoint(*t.stub, 3, unwritable, wait, 20000, &resp);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.error_message().find(unwritable), std::string::npos)
        << s.error_message();
  }
}

}  // namespace
}  // namespace zeroshard
