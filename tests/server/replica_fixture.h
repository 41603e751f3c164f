// The fixture of the replica tests (docs/DESIGN.md, "Replicas"): three
// in-process servers on 127.0.0.1 (port 0) over SmallManifest(1), clients
// with one or two copies, one two-phase step of worker 0 over the whole
// flat space, and a one-copy reference on fresh servers.
#ifndef ZEROSHARD_TESTS_SERVER_REPLICA_FIXTURE_H_
#define ZEROSHARD_TESTS_SERVER_REPLICA_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/checkpoint_commit.h"
#include "client/client_options.h"
#include "client/shard_cluster.h"
#include "common/layout.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/server/server_test_util.h"
#include "wire/proto_convert.h"
#include "wire/slot_metadata.h"

namespace zeroshard::testing {

constexpr uint32_t kServers = 3;

class ReplicaRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = SmallManifest(1);
    for (uint32_t k = 0; k < kServers; ++k) {
      servers_.push_back(StartServer(k, kServers));
      ASSERT_NE(servers_.back().server, nullptr);
      addresses_.push_back(
          absl::StrCat("127.0.0.1:", servers_.back().server->port()));
    }
    absl::StatusOr<FlatLayout> layout =
        FlatLayout::Create(FromProto(manifest_), kServers, 1);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = std::make_unique<FlatLayout>(*std::move(layout));
  }

  // A cluster client with `replicas` copies and quick retries; calls end
  // after `call_timeout`, a silent server is asked for `probe`.
  std::unique_ptr<ShardCluster> Client(
      int replicas, absl::Duration call_timeout = absl::Seconds(20),
      absl::Duration probe = absl::Seconds(5)) {
    ShardClientOptions o;
    o.run_id = kTestRunId;
    o.replicas = replicas;
    o.call_timeout = call_timeout;
    o.silence_probe = probe;
    o.control_timeout = absl::Seconds(20);
    o.retry.max_attempts = 3;
    absl::StatusOr<std::unique_ptr<ShardCluster>> c =
        ShardCluster::Connect(addresses_, o, *layout_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Every element's FP32 master weight, through `cluster`.
  std::vector<float> All(ShardCluster& cluster) {
    std::vector<float> w(layout_->total_elems());
    absl::StatusOr<GatherResult> g =
        cluster.Gather({FlatRange{0, layout_->total_elems()}}, DType::kFp32,
                       -1, w.data(), w.size() * sizeof(float));
    EXPECT_TRUE(g.ok()) << g.status();
    return w;
  }

  // A client of two copies on servers initialised with seed 5.
  std::unique_ptr<ShardCluster> TwoCopies(
      absl::Duration call_timeout = absl::Seconds(20),
      absl::Duration probe = absl::Seconds(5)) {
    std::unique_ptr<ShardCluster> two = Client(2, call_timeout, probe);
    if (two == nullptr) return nullptr;
    absl::StatusOr<std::vector<ServerInit>> r = two->Init(TwoCopyInit());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(two) : nullptr;
  }

  // One weight of slot 1's copy on server 2 changed behind the client.
  void Diverge() {
    const FlatRange r = layout_->ServerRange(1);
    grpc::ClientContext ctx;
    SetDeadline(ctx, 20000);
    ctx.AddMetadata(kSlotMetadataKey, "1");
    ctx.AddMetadata(kCopiesMetadataKey, "2");
    v1::SetWeightsResponse response;
    auto writer = servers_[2].stub->SetWeights(&ctx, &response);
    v1::WeightPiece piece;
    piece.set_offset(r.begin + 5);
    piece.set_dtype(v1::DTYPE_FP32);
    const float x = 0.25f;
    piece.set_data(std::string(reinterpret_cast<const char*>(&x), sizeof(x)));
    ASSERT_TRUE(writer->Write(piece));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }

  // One two-phase step of worker 0 over the whole flat space.
  absl::Status Step(ShardCluster& cluster, uint64_t step, float g) {
    std::vector<float> grads(layout_->total_elems(), g);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] *= 1 + (i % 7);
    StepCommit commit{.coefficient = 1.0, .skip = false, .prepare = true};
    absl::StatusOr<PushResult> pushed = cluster.PushGrad(
        step, 0,
        {GradSpan{FlatRange{0, layout_->total_elems()}, DType::kFp32,
                  grads.data()}},
        commit, false);
    if (!pushed.ok()) return pushed.status();
    return cluster.ApplyStep(step, 0, absl::Seconds(20)).status();
  }

  // Waits for the checkpoint of `step` armed under `dir` and commits it, as
  // rank 0's coordinator does.
  void CommitArmed(ShardCluster& cluster, uint64_t step,
                   const std::string& dir) {
    absl::StatusOr<std::vector<ShardFile>> files =
        cluster.WaitCheckpoint(step, dir, absl::Seconds(20));
    ASSERT_TRUE(files.ok()) << files.status();
    CheckpointInfo info;
    info.step = step;
    info.layout = layout_.get();
    ASSERT_TRUE(CommitCheckpoint(dir, *files, info, 0).ok());
  }

  // TwoCopies' Init.
  static InitOptions TwoCopyInit() {
    InitOptions init;
    init.seed = 5;
    init.num_workers = 1;
    init.replicas = 2;
    return init;
  }

  // A one-copy cluster of fresh servers initialised as TwoCopies' are; the
  // fixture's addresses become theirs.
  std::unique_ptr<ShardCluster> FreshOneCopy() {
    std::vector<std::string> addresses;
    for (uint32_t k = 0; k < kServers; ++k) {
      reference_.push_back(StartServer(k, kServers));
      addresses.push_back(
          absl::StrCat("127.0.0.1:", reference_.back().server->port()));
    }
    addresses_ = addresses;
    std::unique_ptr<ShardCluster> ref = Client(1);
    if (ref == nullptr) return nullptr;
    InitOptions init;
    init.seed = 5;
    init.num_workers = 1;
    EXPECT_TRUE(ref->Init(init).ok());
    return ref;
  }

  // The weights after `steps` of Step (gradients 0.01, 0.02, ...) on
  // FreshOneCopy.
  std::vector<float> OneCopyReference(uint64_t steps) {
    std::unique_ptr<ShardCluster> ref = FreshOneCopy();
    if (ref == nullptr) return {};
    for (uint64_t s = 0; s < steps; ++s) {
      EXPECT_TRUE(Step(*ref, s, 0.01f * (s + 1)).ok());
    }
    return All(*ref);
  }

  // A fresh, empty server k at `port` (a replacement at the dead one's
  // address), once `cluster` finds it answering (within 20 s).
  ::testing::AssertionResult StartFreshServer(const ShardCluster& cluster,
                                              int k, int port) {
    ShardServer::Options options;
    options.server_index = k;
    options.num_servers = kServers;
    options.listen_address = absl::StrCat("127.0.0.1:", port);
    absl::StatusOr<std::unique_ptr<ShardServer>> fresh =
        ShardServer::Start(options);
    if (!fresh.ok()) {
      return ::testing::AssertionFailure() << fresh.status();
    }
    servers_[k].server = *std::move(fresh);
    if (!AnswersAgainWithin(cluster, k, absl::Seconds(20))) {
      return ::testing::AssertionFailure()
             << "server " << k << " does not answer at port " << port;
    }
    return ::testing::AssertionSuccess();
  }

  // Asks server k, as rank 0's watcher does, until it answers again or
  // `within` passes.
  static bool AnswersAgainWithin(const ShardCluster& cluster, int k,
                                 absl::Duration within) {
    for (const absl::Time end = absl::Now() + within; absl::Now() < end;
         absl::SleepFor(absl::Milliseconds(100))) {
      absl::StatusOr<bool> a = cluster.AnswersAgain(k, absl::Seconds(1));
      EXPECT_TRUE(a.ok()) << a.status();
      if (a.ok() && *a) return true;
    }
    return false;
  }

  v1::ModelManifest manifest_;
  std::vector<TestServer> servers_;
  std::vector<TestServer> reference_;  // FreshOneCopy's
  std::vector<std::string> addresses_;
  std::unique_ptr<FlatLayout> layout_;
};

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SERVER_REPLICA_FIXTURE_H_
