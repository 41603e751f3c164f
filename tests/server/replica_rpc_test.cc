// Replicas on real in-process servers (docs/DESIGN.md, "Replicas"): with
// InitRequest.replicas 2, server k also keeps a copy of slot k - 1 mod S,
// reached through the "zs-slot" metadata; a client with replicas 2 writes
// both copies, reads the first that answers and leaves a server that stops
// answering; copies that diverge are named.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/call_canceller.h"
#include "client/checkpoint_commit.h"
#include "client/client_options.h"
#include "client/shard_cluster.h"
#include "common/layout.h"
#include "client/copy_audit.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/server/replica_fixture.h"
#include "tests/server/server_test_util.h"
#include "tests/support/tcp_proxy.h"
#include "wire/proto_convert.h"
#include "wire/slot_metadata.h"

namespace zeroshard::testing {
namespace {

// Every FP32 master weight of `range` from `stub`'s copy of `slot`; empty
// (with a test failure) when the call fails.
std::string GatherCopy(v1::ShardService::Stub& stub, uint32_t slot,
                       FlatRange range) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 20000);
  ctx.AddMetadata(kSlotMetadataKey, absl::StrCat(slot));
  v1::GatherRequest req;
  v1::FlatRange* fr = req.add_ranges();
  fr->set_offset(range.begin);
  fr->set_length(range.size());
  req.set_dtype(v1::DTYPE_FP32);
  req.set_min_version(-1);
  auto reader = stub.Gather(&ctx, req);
  v1::GatherChunk chunk;
  std::string out;
  while (reader->Read(&chunk)) out += chunk.data();
  grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  return s.ok() ? out : std::string();
}

grpc::Status InspectSlot(v1::ShardService::Stub& stub, const std::string& slot,
                         v1::InspectResponse* out) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 20000);
  ctx.AddMetadata(kSlotMetadataKey, slot);
  return stub.Inspect(&ctx, v1::InspectRequest(), out);
}

TEST_F(ReplicaRpcTest, EachServerKeepsTheSlotBeforeItsOwnAndCallsNameTheSlot) {
  for (uint32_t k = 0; k < kServers; ++k) {
    v1::InitRequest init = MakeInit(manifest_, kServers, k, 1, 0);
    init.set_replicas(2);
    ASSERT_TRUE(InitServer(*servers_[k].stub, init).ok());
  }
  for (uint32_t k = 0; k < kServers; ++k) {
    v1::ShardService::Stub& stub = *servers_[k].stub;
    const uint32_t before = (k + kServers - 1) % kServers;
    v1::InspectResponse own = Inspect(stub);
    EXPECT_EQ(own.slot(), k);
    EXPECT_EQ(own.replicas(), 2u);
    v1::InspectResponse copy;
    ASSERT_TRUE(InspectSlot(stub, absl::StrCat(before), &copy).ok());
    EXPECT_EQ(copy.slot(), before);
    EXPECT_EQ(copy.server_index(), k);
    EXPECT_EQ(copy.owned_begin(), layout_->ServerRange(before).begin);
    EXPECT_EQ(copy.owned_end(), layout_->ServerRange(before).end);
    // The copy starts with the values its slot's own server has.
    std::string a, b;
    const FlatRange r = layout_->ServerRange(before);
    ASSERT_TRUE(GatherBytes(*servers_[before].stub, {r}, v1::DTYPE_FP32, -1,
                            20000, &a)
                    .ok());
    b = GatherCopy(stub, before, r);
    EXPECT_EQ(a, b) << "slot " << before << " on server " << k;
    // A slot the server does not hold, and metadata that is no slot.
    v1::InspectResponse none;
    grpc::Status s =
        InspectSlot(stub, absl::StrCat((k + 1) % kServers), &none);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find(absl::StrCat("a replica of slot ", before)),
              std::string::npos)
        << s.error_message();
    s = InspectSlot(stub, "1x", &none);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("is not a slot number"), std::string::npos);
  }
}

// The copy of a slot keeps every rule its slot's own server keeps: a push
// of another run, of a step ahead, outside the slot, or from a caller that
// writes one copy is refused and changes nothing.
TEST_F(ReplicaRpcTest, TheCopyRefusesWhatItsSlotRefusesAndChangesNothing) {
  for (uint32_t k = 0; k < kServers; ++k) {
    v1::InitRequest init = MakeInit(manifest_, kServers, k, 1, 0);
    init.set_replicas(2);
    ASSERT_TRUE(InitServer(*servers_[k].stub, init).ok());
  }
  v1::ShardService::Stub& server1 = *servers_[1].stub;  // slot 0's copy
  const FlatRange slot0 = layout_->ServerRange(0);
  const FlatRange slot1 = layout_->ServerRange(1);
  const std::vector<std::pair<std::string, std::string>> copy = {
      {kSlotMetadataKey, "0"}, {kCopiesMetadataKey, "2"}};
  const std::vector<float> g(64, 0.5f);
  const std::string before = GatherCopy(server1, 0, slot0);
  v1::PushGradHeader other_run = Header(0);
  other_run.set_run_id("another-run");
  struct Case {
    const char* what;
    v1::PushGradHeader header;
    uint64_t offset;
    std::vector<std::pair<std::string, std::string>> metadata;
    grpc::StatusCode code;
  };
  const Case cases[] = {
      {"another run", other_run, slot0.begin, copy,
       grpc::StatusCode::PERMISSION_DENIED},
      {"a step ahead", Header(5), slot0.begin, copy, grpc::StatusCode::ABORTED},
      {"outside the slot", Header(0), slot1.begin, copy,
       grpc::StatusCode::INVALID_ARGUMENT},
      {"one copy written", Header(0), slot0.begin, {{kSlotMetadataKey, "0"}},
       grpc::StatusCode::FAILED_PRECONDITION},
  };
  for (const Case& c : cases) {
    grpc::Status s = Push(server1, c.header, {Fp32Piece(c.offset, g)}, 1.0,
                          false, nullptr, /*prepare=*/true, c.metadata);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
  }
  v1::InspectResponse r;
  ASSERT_TRUE(InspectSlot(server1, "0", &r).ok());
  EXPECT_EQ(r.min_version(), 0u);
  EXPECT_EQ(r.max_version(), 0u);
  EXPECT_EQ(r.prepared_elems(), 0u);
  EXPECT_EQ(r.pending_grad_bytes(), 0u);
  const std::string after = GatherCopy(server1, 0, slot0);
  EXPECT_EQ(after, before);
  // A push the copy accepts: prepared, then applied on ApplyStep.
  grpc::Status s = Push(server1, Header(0), {Fp32Piece(slot0.begin, g)}, 1.0,
                        false, nullptr, /*prepare=*/false, copy);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(ReplicaRpcTest, ReplicasOutsideOneOrTwoAreRefused) {
  v1::InitRequest init = MakeInit(manifest_, kServers, 0, 1, 0);
  init.set_replicas(3);
  grpc::Status s = InitServer(*servers_[0].stub, init);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("must be 1 or 2"), std::string::npos);
  // One server has no other server for the copy.
  TestServer alone = StartServer(0, 1);
  init = MakeInit(manifest_, 1, 0, 1, 0);
  init.set_replicas(2);
  s = InitServer(*alone.stub, init);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("at least 2 servers"), std::string::npos);
  // A one-copy server reached for another slot names what it holds.
  init = MakeInit(manifest_, kServers, 1, 1, 0);
  ASSERT_TRUE(InitServer(*servers_[1].stub, init).ok());
  v1::InspectResponse none;
  s = InspectSlot(*servers_[1].stub, "0", &none);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("one copy"), std::string::npos);
  // A client whose silence probe would never wait is refused at Connect.
  ShardClientOptions o;
  o.replicas = 2;
  o.silence_probe = absl::ZeroDuration();
  const absl::StatusOr<std::unique_ptr<ShardCluster>> c =
      ShardCluster::Connect(addresses_, o, *layout_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("silence_probe"), std::string::npos)
      << c.status();
}

TEST_F(ReplicaRpcTest, BothCopiesTrainAlikeAndALostServerCostsNoStep) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  std::unique_ptr<ShardCluster> one = Client(1);
  ASSERT_NE(two, nullptr);
  for (uint64_t s = 0; s < 3; ++s) ASSERT_TRUE(Step(*two, s, 0.01f * (s + 1)).ok());
  // Every slot's copy holds what its own server holds, bit for bit.
  EXPECT_TRUE(two->CheckCopiesAgree().ok());
  for (int slot = 0; slot < static_cast<int>(kServers); ++slot) {
    absl::StatusOr<ServerStatus> copy =
        two->InspectCopy(slot, (slot + 1) % kServers);
    ASSERT_TRUE(copy.ok()) << copy.status();
    EXPECT_EQ(copy->min_version, 3u);
    EXPECT_EQ(copy->max_version, 3u);
  }
  const std::vector<float> before = All(*one);

  // Server 1 goes: its slot is read from, and written to, server 2's copy;
  // slot 0 keeps its own copy on server 0 alone.
  servers_[1].server.reset();
  EXPECT_EQ(All(*two), before);
  EXPECT_TRUE(two->ServerGone(1));
  ASSERT_TRUE(Step(*two, 3, 0.04f).ok());
  ASSERT_TRUE(Step(*two, 4, 0.05f).ok());
  EXPECT_TRUE(two->CheckCopiesAgree().ok());

  // The same five steps on a one-copy cluster of fresh servers.
  EXPECT_EQ(All(*two), OneCopyReference(5));

  // Server 2 goes too: slot 1 has no copy left, said as such.
  servers_[2].server.reset();
  std::vector<float> w(layout_->total_elems());
  absl::StatusOr<GatherResult> g =
      two->Gather({FlatRange{0, layout_->total_elems()}}, DType::kFp32, -1,
                  w.data(), w.size() * sizeof(float));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(g.status().message().find("every copy of slot 1 is gone"),
            std::string::npos)
      << g.status();
}

TEST_F(ReplicaRpcTest, ACopyThatDivergedIsNamed) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());
  ASSERT_TRUE(two->CheckCopiesAgree().ok());
  Diverge();
  const FlatRange r = layout_->ServerRange(1);
  const absl::Status s = two->CheckCopiesAgree();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(absl::StrCat("copies of slot 1 (flat [", r.begin,
                                          ", ", r.end, "))")),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("server 1 ("), std::string::npos) << s;
  EXPECT_NE(s.message().find("server 2 ("), std::string::npos) << s;
}

// A server that died and came back empty at its address, met by a
// comparison before any write did: its copies are lost, not different
// (Inspect answers a server without state instead of refusing it).
TEST_F(ReplicaRpcTest, AComparisonMeetingAnEmptyReplacementLeavesIt) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());
  const int port = servers_[2].server->port();
  servers_[2].server.reset();
  ShardServer::Options options;
  options.server_index = 2;
  options.num_servers = kServers;
  options.listen_address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<ShardServer>> fresh = ShardServer::Start(options);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  servers_[2].server = *std::move(fresh);
  ASSERT_TRUE(two->WaitForConnected(2, absl::Now() + absl::Seconds(20)));
  CopyAudit audit(two.get(), 1);
  audit.Start(1);
  const absl::Status s = audit.Finish();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(audit.compared(), 1u);
  EXPECT_TRUE(two->ServerGone(2));
  // The slots go on from their other copies.
  ASSERT_TRUE(Step(*two, 1, 0.02f).ok());
  EXPECT_TRUE(two->CheckCopiesAgree().ok());
}

// A server the client left while it lived (its connections reset until the
// client's tries were spent) answers again with the state it had: not
// trusted, it is replaced and both its copies restored from a checkpoint,
// after which they hash as their live twins do.
// A server this client left still holds the region the client dropped
// then (it did not answer, so nothing closed it). Taken back, the client
// closes that region before it opens another: the server holds one region
// of this client, not two, and the step through the new one trains alike.
TEST_F(ReplicaRpcTest, ARegionDroppedOnLeavingIsClosedWhenTheServerIsBack) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  const std::vector<FlatRange> all = {{0, layout_->total_elems()}};
  absl::StatusOr<int> attached = two->AttachSharedMemory(all);
  ASSERT_TRUE(attached.ok()) << attached.status();
  ASSERT_EQ(*attached, 3);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());
  two->LeaveServer(1, absl::UnavailableError("left by the test"));
  ASSERT_TRUE(two->ServerGone(1));
  two->MarkServerBack(1);
  attached = two->AttachSharedMemory(all);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(*attached, 3);
  absl::StatusOr<ServerStatus> s1 = two->Inspect(1);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->counters.calls["OpenRegion"], 2u);
  EXPECT_EQ(s1->counters.calls["CloseRegion"], 1u);
  // Another attach finds every region in place and closes nothing more.
  ASSERT_TRUE(two->AttachSharedMemory(all).ok());
  s1 = two->Inspect(1);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->counters.calls["CloseRegion"], 1u);
  EXPECT_EQ(s1->counters.calls["OpenRegion"], 2u);
  ASSERT_TRUE(Step(*two, 1, 0.02f).ok());
}

TEST_F(ReplicaRpcTest, AServerBackFromAPartitionTakesItsCopiesBack) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start(addresses_[2]);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  addresses_[2] = (*proxy)->address();
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());
  // Every connection to server 2 reset as it opens, until the step has
  // left it; the server itself goes on holding step 1.
  std::atomic<bool> cut{true};
  std::thread dropper([&] {
    while (cut.load()) {
      (*proxy)->Drop();
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  const absl::Status during = Step(*two, 1, 0.02f);
  cut = false;
  dropper.join();
  ASSERT_TRUE(during.ok()) << during;
  ASSERT_TRUE(two->ServerGone(2));
  ASSERT_TRUE(Step(*two, 2, 0.03f).ok());  // server 2's copies miss it
  // A client new to the cluster (the launcher's export) leaves the copies
  // that stand behind their twins, and reads the current ones.
  std::unique_ptr<ShardCluster> late = Client(2);
  ASSERT_NE(late, nullptr);
  ASSERT_TRUE(late->LeaveStaleCopies().ok());
  EXPECT_EQ(late->GoneServers(), std::vector<int>{2});
  EXPECT_EQ(All(*late), All(*two));
  // As rank 0's watcher does: asked until it answers (the channel waits
  // out its reconnect backoff first).
  ASSERT_TRUE(AnswersAgainWithin(*two, 2, absl::Seconds(20)));

  // Rank 0's revival: a checkpoint of step 3, then server 2 restored.
  const std::string dir = ::testing::TempDir() + "/partition_ckpt";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(two->ArmCheckpoint(3, dir).ok());
  CommitArmed(*two, 3, dir);
  const absl::Status revived = two->ReviveServer(2, TwoCopyInit(), dir, 3);
  ASSERT_TRUE(revived.ok()) << revived;
  EXPECT_FALSE(two->ServerGone(2));
  absl::Status agree = two->CheckCopiesAgree();
  EXPECT_TRUE(agree.ok()) << agree;
  ASSERT_TRUE(Step(*two, 3, 0.04f).ok());
  agree = two->CheckCopiesAgree();
  EXPECT_TRUE(agree.ok()) << agree;
  std::filesystem::remove_all(dir);
}

// A server that stops answering without closing anything (a partition
// that drops packets, a hung process) is left once a call to it has waited
// a second and a brief probe goes unanswered (the client's watch), and the
// step goes on with the other copies long before its deadline; a call past
// its deadline is followed by the same probe. A long wait on a server that
// answers (a Gather for a version not applied yet) leaves nothing.
TEST_F(ReplicaRpcTest, AServerThatStopsAnsweringIsLeftAndAWaitIsNot) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start(addresses_[2]);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  addresses_[2] = (*proxy)->address();
  // Probes long enough for a live server under a sanitizer's load.
  const absl::Duration probe = absl::Seconds(2);
  std::unique_ptr<ShardCluster> two = TwoCopies(absl::Seconds(20), probe);
  ASSERT_NE(two, nullptr);
  // A client whose calls end after half a second, so that its deadline
  // comes before its watch would ask.
  std::unique_ptr<ShardCluster> brief =
      Client(2, absl::Milliseconds(500), probe);
  ASSERT_NE(brief, nullptr);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());

  // Waiting 2.5 s for a version no step brings, on servers that answer
  // the watch's probes: nothing is left.
  std::vector<float> w(layout_->total_elems());
  CallCanceller cancel;
  std::thread stop([&] {
    absl::SleepFor(absl::Milliseconds(2500));
    cancel.Cancel();
  });
  const absl::StatusOr<GatherResult> early =
      two->Gather({FlatRange{0, layout_->total_elems()}}, DType::kFp32,
                  /*min_version=*/5, w.data(), w.size() * sizeof(float),
                  &cancel);
  stop.join();
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), absl::StatusCode::kCancelled)
      << early.status();
  EXPECT_TRUE(two->GoneServers().empty());

  (*proxy)->Stall();
  const absl::Time start = absl::Now();
  const absl::Status during = Step(*two, 1, 0.02f);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(during.ok()) << during;
  EXPECT_EQ(two->GoneServers(), std::vector<int>{2});
  // A second, a tick, the probe; not the calls' 20 s.
  EXPECT_LT(took, kLagBeforeProbe + kWatchEvery + probe + absl::Seconds(4))
      << took;
  ASSERT_TRUE(Step(*two, 2, 0.03f).ok());
  EXPECT_TRUE(two->CheckCopiesAgree().ok());
  const std::vector<float> survived = All(*two);
  // The brief client's read of server 2 runs out its deadline; the probe
  // goes unanswered, and the slot is read from its other copy.
  EXPECT_EQ(All(*brief), survived);
  EXPECT_EQ(brief->GoneServers(), std::vector<int>{2});

  // The same three steps on a one-copy cluster of fresh servers.
  EXPECT_EQ(survived, OneCopyReference(3));

  // Relayed again, it answers again (rank 0's watcher would revive it).
  (*proxy)->Resume();
  EXPECT_TRUE(AnswersAgainWithin(*two, 2, absl::Seconds(20)));
}

// A silent server holding the last live copy of a slot is never left: the
// step waits for it, as with one copy, and goes on when it answers again
// (leaving it would end the run).
TEST_F(ReplicaRpcTest, TheLastCopyOfASlotIsWaitedForNotLeft) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start(addresses_[2]);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  addresses_[2] = (*proxy)->address();
  std::unique_ptr<ShardCluster> two = TwoCopies(absl::Seconds(20), absl::Seconds(1));
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());
  servers_[1].server.reset();  // slot 1 lives on server 2 alone now
  ASSERT_TRUE(Step(*two, 1, 0.02f).ok());
  ASSERT_EQ(two->GoneServers(), std::vector<int>{1});
  (*proxy)->Stall();
  std::thread resume([&] {
    absl::SleepFor(absl::Milliseconds(3500));
    (*proxy)->Resume();
  });
  const absl::Status during = Step(*two, 2, 0.03f);
  resume.join();
  EXPECT_TRUE(during.ok()) << during;
  EXPECT_EQ(two->GoneServers(), std::vector<int>{1});
}

// A client cut off from every server (its own link down) leaves none: each
// is silent, but so is every other, so its calls wait out their deadline
// as with one copy, and the run can go on once the link is back.
TEST_F(ReplicaRpcTest, AClientCutOffFromEveryServerLeavesNone) {
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  for (uint32_t k = 0; k < kServers; ++k) {
    absl::StatusOr<std::unique_ptr<TcpProxy>> p = TcpProxy::Start(addresses_[k]);
    ASSERT_TRUE(p.ok()) << p.status();
    addresses_[k] = (*p)->address();
    proxies.push_back(*std::move(p));
  }
  std::unique_ptr<ShardCluster> two =
      TwoCopies(absl::Milliseconds(1500), absl::Milliseconds(300));
  ASSERT_NE(two, nullptr);
  ASSERT_TRUE(Step(*two, 0, 0.01f).ok());
  for (auto& p : proxies) p->Stall();
  std::vector<float> w(layout_->total_elems());
  const absl::StatusOr<GatherResult> cut =
      two->Gather({FlatRange{0, layout_->total_elems()}}, DType::kFp32, -1,
                  w.data(), w.size() * sizeof(float));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDeadlineExceeded)
      << cut.status();
  EXPECT_TRUE(two->GoneServers().empty());
  for (auto& p : proxies) p->Resume();
  ASSERT_TRUE(Step(*two, 1, 0.02f).ok());
  EXPECT_TRUE(two->GoneServers().empty());
}

// The audit a run keeps (client/copy_audit.h): due every `every` steps,
// silent between them, the verdict of the comparison started told once
// by Finish, and one no Finish heard not lost when the next starts.
TEST_F(ReplicaRpcTest, TheCopiesAreComparedEveryKStepsAndADivergenceIsHeard) {
  std::unique_ptr<ShardCluster> two = TwoCopies();
  ASSERT_NE(two, nullptr);
  CopyAudit never(two.get(), 0);
  CopyAudit audit(two.get(), 3);
  EXPECT_FALSE(never.Due(3));
  EXPECT_FALSE(audit.Due(0));
  EXPECT_TRUE(audit.Due(3));
  EXPECT_FALSE(audit.Due(4));
  EXPECT_TRUE(audit.Due(6));
  for (uint64_t s = 0; s < 3; ++s) {
    audit.Start(s);
    EXPECT_TRUE(audit.Finish().ok());
    ASSERT_TRUE(Step(*two, s, 0.01f * (s + 1)).ok());
  }
  EXPECT_EQ(audit.compared(), 0u);
  audit.Start(3);  // both copies at version 3, equal
  EXPECT_TRUE(audit.Finish().ok());
  EXPECT_EQ(audit.compared(), 1u);
  ASSERT_TRUE(Step(*two, 3, 0.02f).ok());

  Diverge();
  audit.Start(4);  // not due: nothing compared, nothing heard
  EXPECT_TRUE(audit.Finish().ok());
  EXPECT_EQ(audit.compared(), 1u);
  ASSERT_TRUE(Step(*two, 4, 0.02f).ok());
  ASSERT_TRUE(Step(*two, 5, 0.02f).ok());
  audit.Start(6);
  const absl::Status s = audit.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("copies of slot 1"), std::string::npos) << s;
  EXPECT_EQ(audit.compared(), 2u);
  EXPECT_TRUE(audit.Finish().ok()) << "told once";

  // A verdict nobody heard before the next comparison started is kept.
  ASSERT_TRUE(Step(*two, 6, 0.02f).ok());
  ASSERT_TRUE(Step(*two, 7, 0.02f).ok());
  ASSERT_TRUE(Step(*two, 8, 0.02f).ok());
  audit.Start(9);
  // (A run would stop at the next Finish; the comparison may see either
  // version, and the copies differ at both.)
  ASSERT_TRUE(Step(*two, 9, 0.02f).ok());
  ASSERT_TRUE(Step(*two, 10, 0.02f).ok());
  ASSERT_TRUE(Step(*two, 11, 0.02f).ok());
  audit.Start(12);
  EXPECT_EQ(audit.Finish().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(audit.compared(), 4u);

  // One copy: nothing to compare, even when due.
  std::unique_ptr<ShardCluster> one = Client(1);
  if (one != nullptr) {
    CopyAudit single(one.get(), 1);
    EXPECT_FALSE(single.Due(1));
  }
}

}  // namespace
}  // namespace zeroshard::testing
