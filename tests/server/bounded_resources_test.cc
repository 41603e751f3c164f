// Bounded resources and honest answers over real gRPC: the KV store's runs,
// attempts and limits; idle PushGrad streams failed and their buffers
// freed; SetWeights all or nothing.
#include <grpcpp/grpcpp.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/generic_call.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/server/server_test_util.h"
#include "wire/grpc_tuning.h"
#include "wire/proto_buffer.h"

namespace zeroshard {
namespace {

using testing::Inspect;
using testing::SetDeadline;

constexpr char kRun[] = "run-a";

struct Server {
  std::unique_ptr<ShardServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::ShardService::Stub> stub;
};

Server Start(absl::Duration push_idle_timeout = absl::Seconds(60)) {
  ShardServer::Options options;
  options.push_idle_timeout = push_idle_timeout;
  absl::StatusOr<std::unique_ptr<ShardServer>> server =
      ShardServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  Server s;
  if (!server.ok()) return s;
  s.server = *std::move(server);
  s.channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", s.server->port()),
      grpc::InsecureChannelCredentials(), TunedChannelArguments());
  s.channel->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::seconds(10));
  s.stub = v1::ShardService::NewStub(s.channel);
  return s;
}

v1::InitResponse Init(v1::ShardService::Stub& stub) {
  v1::InitRequest init =
      testing::MakeInit(testing::SmallManifest(1), 1, 0, 7, 1024);
  init.set_run_id(kRun);
  v1::InitResponse response;
  const grpc::Status s = testing::InitServer(stub, init, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return response;
}

// --- KV store --------------------------------------------------------------

grpc::Status KvSet(v1::ShardService::Stub& stub, const std::string& run,
                   uint64_t attempt, const std::string& key,
                   const std::string& value) {
  grpc::ClientContext c;
  SetDeadline(c, 20000);
  v1::KvSetRequest req;
  req.set_run_id(run);
  req.set_attempt(attempt);
  req.set_key(key);
  req.set_value(value);
  v1::KvSetResponse resp;
  return stub.KvSet(&c, req, &resp);
}

grpc::Status KvGet(v1::ShardService::Stub& stub, const std::string& run,
                   uint64_t attempt, const std::string& key,
                   v1::KvGetResponse* resp) {
  grpc::ClientContext c;
  SetDeadline(c, 20000);
  v1::KvGetRequest req;
  req.set_run_id(run);
  req.set_attempt(attempt);
  req.set_key(key);
  return stub.KvGet(&c, req, resp);
}

grpc::Status KvWait(v1::ShardService::Stub& stub, const std::string& run,
                    uint64_t attempt, const std::vector<std::string>& keys,
                    int deadline_ms) {
  grpc::ClientContext c;
  SetDeadline(c, deadline_ms);
  v1::KvWaitRequest req;
  req.set_run_id(run);
  req.set_attempt(attempt);
  for (const std::string& k : keys) req.add_keys(k);
  v1::KvWaitResponse resp;
  return stub.KvWait(&c, req, &resp);
}

// The bug report: a failed attempt's rendezvous keys stayed on the live
// servers and made the next attempt hang.
TEST(KvScopeRpcTest, ANewerAttemptDropsTheOlderOnesKeysAndAbortsItsWaiters) {
  Server t = Start();
  ASSERT_TRUE(KvSet(*t.stub, kRun, 0, "zs/comm/0", "dead-rank-0").ok());
  grpc::Status old_wait;
  std::thread waiter(
      [&] { old_wait = KvWait(*t.stub, kRun, 0, {"zs/comm/1"}, 20000); });
  // Wait (bounded) until the old attempt's waiter is registered.
  v1::InspectResponse info;
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  do {
    info = Inspect(*t.stub);
    absl::SleepFor(absl::Milliseconds(5));
  } while (info.counters().calls().count("KvWait") == 0 &&
           absl::Now() < limit);

  // Attempt 1 reads: the dead attempt's key is gone, and its waiter is
  // answered ABORTED instead of hanging.
  v1::KvGetResponse got;
  ASSERT_TRUE(KvGet(*t.stub, kRun, 1, "zs/comm/0", &got).ok());
  EXPECT_FALSE(got.found());
  waiter.join();
  EXPECT_EQ(old_wait.error_code(), grpc::StatusCode::ABORTED)
      << old_wait.error_message();

  // The new attempt's own rendezvous works; the old attempt is refused.
  ASSERT_TRUE(KvSet(*t.stub, kRun, 1, "zs/comm/0", "live-rank-0").ok());
  EXPECT_TRUE(KvWait(*t.stub, kRun, 1, {"zs/comm/0"}, 20000).ok());
  const grpc::Status stale = KvSet(*t.stub, kRun, 0, "zs/comm/1", "late");
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(stale.error_message().find("attempt 1"), std::string::npos)
      << stale.error_message();
  EXPECT_EQ(KvGet(*t.stub, kRun, 0, "zs/comm/0", &got).error_code(),
            grpc::StatusCode::ABORTED);
  EXPECT_EQ(KvWait(*t.stub, kRun, 0, {"zs/comm/0"}, 20000).error_code(),
            grpc::StatusCode::ABORTED);
  ASSERT_TRUE(KvGet(*t.stub, kRun, 1, "zs/comm/0", &got).ok());
  EXPECT_EQ(got.value(), "live-rank-0");
}

TEST(KvScopeRpcTest, BadRunIdsAndLimits) {
  Server t = Start();
  v1::KvGetResponse got;
  for (const std::string& bad :
       {std::string(), std::string(129, 'r'), std::string("a\nb")}) {
    EXPECT_EQ(KvSet(*t.stub, bad, 0, "k", "v").error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(KvGet(*t.stub, bad, 0, "k", &got).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(KvWait(*t.stub, bad, 0, {"k"}, 20000).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  const grpc::Status big =
      KvSet(*t.stub, kRun, 0, "big", std::string((1 << 20) + 1, 'v'));
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(big.error_message().find("limit per value"), std::string::npos)
      << big.error_message();
  // 16 MiB of keys and values per run: fifteen values of 1 MiB fit, the
  // sixteenth (with the keys' bytes) does not.
  const std::string mib(1 << 20, 'v');
  for (int i = 0; i < 15; ++i) {
    ASSERT_TRUE(KvSet(*t.stub, kRun, 0, absl::StrCat("k", i), mib).ok()) << i;
  }
  const grpc::Status over = KvSet(*t.stub, kRun, 0, "k15", mib);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find("limit of bytes per run"),
            std::string::npos)
      << over.error_message();
  // Another run is not affected by this one's use.
  EXPECT_TRUE(KvSet(*t.stub, "run-b", 0, "k", mib).ok());
}

TEST(KvScopeRpcTest, OnlyTheInitialisedRunMayUseTheStore) {
  Server t = Start();
  ASSERT_TRUE(KvSet(*t.stub, kRun, 0, "mine", "1").ok());
  ASSERT_TRUE(KvSet(*t.stub, "stray-run", 0, "theirs", "2").ok());
  grpc::Status stray_wait;
  std::thread waiter([&] {
    stray_wait = KvWait(*t.stub, "stray-run", 0, {"never"}, 20000);
  });
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (Inspect(*t.stub).counters().calls().count("KvWait") == 0 &&
         absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  Init(*t.stub);
  waiter.join();
  EXPECT_EQ(stray_wait.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << stray_wait.error_message();
  v1::KvGetResponse got;
  const grpc::Status denied = KvGet(*t.stub, "stray-run", 0, "theirs", &got);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(denied.error_message().find(kRun), std::string::npos)
      << denied.error_message();
  EXPECT_EQ(KvSet(*t.stub, "stray-run", 0, "k", "v").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(KvWait(*t.stub, "stray-run", 0, {"k"}, 20000).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(KvGet(*t.stub, kRun, 0, "mine", &got).ok());
  EXPECT_EQ(got.value(), "1");
}

// --- Idle PushGrad streams -------------------------------------------------

TEST(PushIdleTest, AnIdleStreamIsFailedAndItsBuffersFreed) {
  Server t = Start(absl::Milliseconds(300));
  const v1::InitResponse init = Init(*t.stub);
  const std::vector<float> g(256, 0.25f);
  v1::PushGradHeader header = testing::Header(0, 0);
  header.set_run_id(kRun);

  grpc::ClientContext c;
  SetDeadline(c, 20000);
  v1::PushGradResponse resp;
  auto w = testing::OpenHeldPush(*t.stub, &c, &resp, header,
                                 init.owned_begin(), g, g.size() * 4);
  ASSERT_NE(w, nullptr);
  // Now idle. The server fails the stream within about 1.25 timeouts and
  // frees its buffers before the status goes out; polled with a deadline.
  const absl::Time start = absl::Now();
  while (Inspect(*t.stub).pending_grad_bytes() != 0 &&
         absl::Now() < start + absl::Seconds(20)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Inspect(*t.stub).pending_grad_bytes(), 0u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  const grpc::Status s = w->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
  EXPECT_NE(s.error_message().find("idle for 0.3 s"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(Inspect(*t.stub).counters().errors().at("DEADLINE_EXCEEDED"), 1u);

  // A stream that keeps sending is not failed, however long it lasts.
  grpc::ClientContext c2;
  SetDeadline(c2, 20000);
  auto w2 = t.stub->PushGrad(&c2, &resp);
  v1::PushGradMessage m;
  *m.mutable_header() = header;
  ASSERT_TRUE(w2->Write(m));
  for (int i = 0; i < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(100));  // pacing, not synchronisation
    m.Clear();
    m.mutable_piece()->set_offset(init.owned_begin() + i * 16);
    m.mutable_piece()->set_dtype(v1::DTYPE_FP32);
    m.mutable_piece()->set_data(g.data(), 16 * sizeof(float));
    ASSERT_TRUE(w2->Write(m)) << i;
  }
  m.Clear();
  m.mutable_commit()->set_coefficient(1.0);
  ASSERT_TRUE(w2->Write(m));
  w2->WritesDone();
  const grpc::Status s2 = w2->Finish();
  EXPECT_TRUE(s2.ok()) << s2.error_message();
  EXPECT_EQ(resp.applied_elems(), 8u * 16);
}

// --- SetWeights, all or nothing -------------------------------------------

grpc::ByteBuffer WeightsPiece(uint64_t offset, const std::vector<float>& v) {
  v1::WeightPiece p;
  p.set_offset(offset);
  p.set_dtype(v1::DTYPE_FP32);
  p.set_data(v.data(), v.size() * sizeof(float));
  return ProtoToByteBuffer(p);
}

// Sends `messages` on a raw SetWeights stream, half-closes and returns the
// status; the reply's elems_written goes to *written.
grpc::Status SendWeights(Server& t, const std::vector<grpc::ByteBuffer>& messages,
                         uint64_t* written) {
  grpc::ClientContext c;
  SetDeadline(c, 20000);
  GenericStreamCall call(t.channel, "/zeroshard.v1.ShardService/SetWeights",
                         &c);
  for (const grpc::ByteBuffer& m : messages) {
    if (!call.Write(m)) break;
  }
  call.WritesDone();
  grpc::ByteBuffer reply;
  *written = 0;
  if (call.Read(&reply)) {
    v1::SetWeightsResponse r;
    if (ParseProtoFromByteBuffer(reply, &r)) *written = r.elems_written();
  }
  return call.Finish();
}

class SetWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = Start();
    const v1::InitResponse init = Init(*t_.stub);
    owned_ = {init.owned_begin(), init.owned_end()};
  }
  std::vector<float> Master() {
    return testing::GatherFp32(*t_.stub, owned_);
  }

  Server t_;
  FlatRange owned_;
};

TEST_F(SetWeightsTest, GarbageInTheMiddleWritesNothing) {
  const std::vector<float> before = Master();
  const std::vector<float> ones(64, 1.0f);
  grpc::Slice junk(std::string("\xff\xff\xff\xff\x0f garbage", 13));
  uint64_t written = 0;
  const grpc::Status s = SendWeights(
      t_,
      {WeightsPiece(owned_.begin, ones), grpc::ByteBuffer(&junk, 1),
       WeightsPiece(owned_.begin + 64, ones)},
      &written);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_NE(s.error_message().find("SetWeights"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(Master(), before);
}

TEST_F(SetWeightsTest, AnInvalidOrOverlappingPieceWritesNothing) {
  const std::vector<float> before = Master();
  const std::vector<float> ones(64, 1.0f);
  uint64_t written = 0;
  grpc::Status s = SendWeights(
      t_,
      {WeightsPiece(owned_.begin, ones), WeightsPiece(owned_.end - 8, ones)},
      &written);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("outside"), std::string::npos)
      << s.error_message();
  s = SendWeights(t_,
                  {WeightsPiece(owned_.begin, ones),
                   WeightsPiece(owned_.begin + 32, ones)},
                  &written);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("overlaps"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(Master(), before);
}

TEST_F(SetWeightsTest, ACancelledStreamWritesNothing) {
  const std::vector<float> before = Master();
  grpc::ClientContext c;
  SetDeadline(c, 20000);
  {
    GenericStreamCall call(t_.channel,
                           "/zeroshard.v1.ShardService/SetWeights", &c);
    ASSERT_TRUE(call.Write(WeightsPiece(owned_.begin,
                                        std::vector<float>(64, 1.0f))));
    c.TryCancel();
    EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The server learns of the cancel asynchronously; its counters show it.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (Inspect(*t_.stub).counters().errors().count("CANCELLED") == 0 &&
         absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Master(), before);
}

TEST_F(SetWeightsTest, AWholeStreamWritesEveryPiece) {
  std::vector<float> want = Master();
  std::vector<grpc::ByteBuffer> messages;
  for (uint64_t at = 0; at < 256; at += 64) {
    std::vector<float> v(64);
    for (uint64_t i = 0; i < 64; ++i) v[i] = 0.5f + at + i;
    std::copy(v.begin(), v.end(), want.begin() + at);
    messages.push_back(WeightsPiece(owned_.begin + at, v));
  }
  uint64_t written = 0;
  const grpc::Status s = SendWeights(t_, messages, &written);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(written, 256u);
  EXPECT_EQ(Master(), want);
}

}  // namespace
}  // namespace zeroshard
