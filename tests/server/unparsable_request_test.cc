// Request bytes that do not parse, on every method, over real gRPC: the
// server answers INVALID_ARGUMENT naming the method (not gRPC's UNIMPLEMENTED
// with no message), authorizes the caller before it parses anything, and
// typed calls still work on the methods that parse their own requests.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/generic_call.h"
#include "gtest/gtest.h"
#include "server/shard_server.h"
#include "tests/server/server_test_util.h"
#include "tests/support/test_files.h"
#include "wire/grpc_tuning.h"

namespace zeroshard::testing {
namespace {

// Every method of zeroshard.v1.ShardService, and whether the client streams.
struct Method {
  const char* name;
  bool client_streaming;
};
constexpr Method kMethods[] = {
    {"Init", false},       {"Gather", false},     {"PushGrad", true},
    {"ApplyStep", false},  {"Inspect", false},    {"Checkpoint", false},
    {"Restore", false},    {"ReadSnapshot", false}, {"SetWeights", true},
    {"KvSet", false},      {"KvGet", false},      {"KvWait", false},
    {"OpenRegion", false}, {"CloseRegion", false}, {"StepLog", false},
    {"Replay", true},
};

// Not a protobuf encoding of anything: a varint tag that never ends.
grpc::ByteBuffer Garbage() {
  grpc::Slice slice(std::string("\xff\xff\xff"));
  return grpc::ByteBuffer(&slice, 1);
}

// Sends Garbage() as the one request message of `method` and returns the
// call's status.
grpc::Status SendGarbage(const std::shared_ptr<grpc::Channel>& channel,
                         const Method& method) {
  grpc::ClientContext context;
  SetDeadline(context, 20000);
  GenericStreamCall call(
      channel, absl::StrCat("/zeroshard.v1.ShardService/", method.name),
      &context);
  if (method.client_streaming) {
    if (call.Write(Garbage())) call.WritesDone();
  } else {
    call.WriteLast(Garbage());
  }
  grpc::ByteBuffer reply;
  while (call.Read(&reply)) {
  }
  return call.Finish();
}

std::shared_ptr<grpc::Channel> ChannelTo(int port) {
  auto channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(),
      TunedChannelArguments());
  channel->WaitForConnected(std::chrono::system_clock::now() +
                            std::chrono::seconds(10));
  return channel;
}

class UnparsableRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = StartServer(0, 1);
    ASSERT_NE(t_.server, nullptr);
    // Initialised, so that no method fails on a missing state before it
    // reads its request.
    const grpc::Status s =
        InitServer(*t_.stub, MakeInit(SmallManifest(1), 1, 0, 7, 1024),
                   &init_);
    ASSERT_TRUE(s.ok()) << s.error_message();
    channel_ = ChannelTo(t_.server->port());
  }

  TestServer t_;
  v1::InitResponse init_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(UnparsableRequestTest, EveryMethodAnswersInvalidArgumentNamingIt) {
  for (const Method& method : kMethods) {
    SCOPED_TRACE(method.name);
    const grpc::Status s = SendGarbage(channel_, method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_TRUE(
        absl::StartsWith(s.error_message(), absl::StrCat(method.name, ": ")))
        << s.error_message();
  }
  // Counted, and nothing changed: the server still serves its state.
  const v1::InspectResponse after = Inspect(*t_.stub);
  EXPECT_EQ(after.counters().errors().at("INVALID_ARGUMENT"),
            std::size(kMethods));
  EXPECT_EQ(after.owned_end(), init_.owned_end());
}

TEST_F(UnparsableRequestTest, TypedCallsStillWork) {
  EXPECT_LT(init_.owned_begin(), init_.owned_end());
  EXPECT_TRUE(Inspect(*t_.stub).initialized());
  {
    grpc::ClientContext c;
    SetDeadline(c, 20000);
    v1::KvSetRequest request;
    request.set_run_id(kTestRunId);
    request.set_key("k");
    request.set_value("v");
    v1::KvSetResponse response;
    const grpc::Status s = t_.stub->KvSet(&c, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  {
    grpc::ClientContext c;
    SetDeadline(c, 20000);
    v1::KvGetRequest request;
    request.set_run_id(kTestRunId);
    request.set_key("k");
    v1::KvGetResponse response;
    const grpc::Status s = t_.stub->KvGet(&c, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(response.found());
    EXPECT_EQ(response.value(), "v");
  }
  {
    grpc::ClientContext c;
    SetDeadline(c, 20000);
    v1::KvWaitRequest request;
    request.set_run_id(kTestRunId);
    request.add_keys("k");
    v1::KvWaitResponse response;
    const grpc::Status s = t_.stub->KvWait(&c, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  const FlatRange owned{init_.owned_begin(), init_.owned_end()};
  {
    // An in-memory snapshot of step 0, waited for (CheckpointWaitReactor's
    // reply), then read back (ReadSnapshot's hand-encoded messages).
    grpc::ClientContext c;
    SetDeadline(c, 20000);
    v1::CheckpointRequest request;
    request.set_step(0);
    request.set_wait(true);
    v1::CheckpointResponse response;
    const grpc::Status s = t_.stub->Checkpoint(&c, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(response.done());
    EXPECT_EQ(response.owned().offset(), owned.begin);
    EXPECT_EQ(response.owned().length(), owned.size());
  }
  {
    grpc::ClientContext c;
    SetDeadline(c, 20000);
    v1::ReadSnapshotRequest request;
    request.set_step(0);
    request.set_array(v1::ReadSnapshotRequest::MASTER);
    v1::FlatRange* range = request.add_ranges();
    range->set_offset(owned.begin);
    range->set_length(owned.size());
    auto reader = t_.stub->ReadSnapshot(&c, request);
    std::vector<float> read(owned.size());
    v1::GatherChunk chunk;
    uint64_t filled = 0;
    while (reader->Read(&chunk)) {
      ASSERT_EQ(chunk.dtype(), v1::DTYPE_FP32);
      ASSERT_EQ(chunk.offset(), owned.begin + filled);
      ASSERT_LE(filled + chunk.data().size() / 4, owned.size());
      std::memcpy(read.data() + filled, chunk.data().data(),
                  chunk.data().size());
      filled += chunk.data().size() / 4;
    }
    const grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(filled, owned.size());
    EXPECT_EQ(read, GatherFp32(*t_.stub, owned));
  }
}

// A caller without credentials learns nothing from a request that does not
// parse: it is refused first.
TEST(UnparsableRequestAuthTest, RefusedBeforeParsed) {
  const std::string dir = MakeTempDir("zs_unparsable_");
  ASSERT_FALSE(dir.empty());
  {
    std::ofstream tokens(dir + "/tokens");
    tokens << "admin unparsable-admin-0123456789abcdef\n";
    ASSERT_TRUE(tokens.good());
  }
  ShardServer::Options options;
  options.credentials_dir = dir;
  auto server = ShardServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::shared_ptr<grpc::Channel> channel = ChannelTo((*server)->port());
  for (const Method& method : kMethods) {
    SCOPED_TRACE(method.name);
    const grpc::Status s = SendGarbage(channel, method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
}

}  // namespace
}  // namespace zeroshard::testing
