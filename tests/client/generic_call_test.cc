// GenericStreamCall against the fake shard service: a whole Gather through
// the generic stub, a server that fails before replying, an unknown method,
// a cancel while a Read is blocked, and a call dropped without Finish; every
// case ends within a bound.
#include "client/generic_call.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <cstring>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_service.h"

namespace zeroshard {
namespace {

using testing::FakeShardCluster;
using testing::FakeValue;

constexpr char kGather[] = "/zeroshard.v1.ShardService/Gather";

FlatLayout OneServerLayout() {
  ModelManifest m;
  m.partition_count = 1;
  m.units = {{"a", {{"a.w", {4096}}}}};
  return *FlatLayout::Create(m, 1, 1);
}

grpc::ByteBuffer GatherRequest(uint64_t offset, uint64_t length) {
  v1::GatherRequest req;
  v1::FlatRange* r = req.add_ranges();
  r->set_offset(offset);
  r->set_length(length);
  req.set_dtype(v1::DTYPE_FP32);
  req.set_max_message_bytes(1024);
  grpc::ByteBuffer out;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<v1::GatherRequest>::Serialize(
                  req, &out, &own)
                  .ok());
  return out;
}

std::shared_ptr<grpc::Channel> Connect(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

TEST(GenericStreamCallTest, ServerStreamingCallReadsEveryReply) {
  FlatLayout layout = OneServerLayout();
  FakeShardCluster cluster(layout);
  auto channel = Connect(cluster.addresses()[0]);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(20));
  GenericStreamCall call(channel, kGather, &ctx);
  ASSERT_TRUE(call.WriteLast(GatherRequest(100, 1000)));
  uint64_t next = 100;
  grpc::ByteBuffer reply;
  while (call.Read(&reply)) {
    v1::GatherChunk chunk;
    grpc::ProtoBufferReader reader(&reply);
    ASSERT_TRUE(chunk.ParseFromZeroCopyStream(&reader));
    ASSERT_EQ(chunk.offset(), next);
    ASSERT_EQ(chunk.data().size() % 4, 0u);
    for (size_t i = 0; i < chunk.data().size() / 4; ++i) {
      float v;
      std::memcpy(&v, chunk.data().data() + 4 * i, 4);
      ASSERT_EQ(v, FakeValue(next + i));
    }
    next += chunk.data().size() / 4;
  }
  EXPECT_EQ(next, 1100u);
  const grpc::Status st = call.Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST(GenericStreamCallTest, ServerErrorComesFromFinish) {
  FlatLayout layout = OneServerLayout();
  FakeShardCluster cluster(layout);
  cluster.server(0).fail_unavailable = 1;
  auto channel = Connect(cluster.addresses()[0]);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(20));
  GenericStreamCall call(channel, kGather, &ctx);
  call.WriteLast(GatherRequest(0, 10));
  grpc::ByteBuffer reply;
  EXPECT_FALSE(call.Read(&reply));
  const grpc::Status st = call.Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(GenericStreamCallTest, UnknownMethodIsUnimplemented) {
  FlatLayout layout = OneServerLayout();
  FakeShardCluster cluster(layout);
  auto channel = Connect(cluster.addresses()[0]);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(20));
  GenericStreamCall call(channel, "/zeroshard.v1.ShardService/NoSuchMethod",
                         &ctx);
  call.WriteLast(GatherRequest(0, 10));
  grpc::ByteBuffer reply;
  EXPECT_FALSE(call.Read(&reply));
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST(GenericStreamCallTest, CancelEndsABlockedReadPromptly) {
  FlatLayout layout = OneServerLayout();
  FakeShardCluster cluster(layout);
  cluster.server(0).gather_delay_ms = 10000;  // replies after 10 s
  auto channel = Connect(cluster.addresses()[0]);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(60));
  GenericStreamCall call(channel, kGather, &ctx);
  ASSERT_TRUE(call.WriteLast(GatherRequest(0, 10)));
  const absl::Time t0 = absl::Now();
  std::thread canceller([&ctx] {
    absl::SleepFor(absl::Milliseconds(100));
    ctx.TryCancel();
  });
  grpc::ByteBuffer reply;
  EXPECT_FALSE(call.Read(&reply));
  canceller.join();
  EXPECT_EQ(call.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST(GenericStreamCallTest, DroppedWithoutFinishEndsPromptly) {
  FlatLayout layout = OneServerLayout();
  FakeShardCluster cluster(layout);
  cluster.server(0).gather_delay_ms = 10000;
  auto channel = Connect(cluster.addresses()[0]);
  const absl::Time t0 = absl::Now();
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(60));
    GenericStreamCall call(channel, kGather, &ctx);
    call.WriteLast(GatherRequest(0, 10));
    // Destroyed here: cancelled, finished and drained.
  }
  {
    grpc::ClientContext ctx;  // never even written to
    SetDeadline(&ctx, absl::Seconds(60));
    GenericStreamCall call(channel, kGather, &ctx);
  }
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

}  // namespace
}  // namespace zeroshard
