// Shared memory between a server and a client on one host: the mapping
// itself (common/shared_memory.h), the server's registry of regions, and
// Gather and PushGrad through a region over real gRPC, bit for bit against
// the same calls over gRPC alone, and every bad region request refused with
// the server's state unchanged.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/shard_client.h"
#include "common/dtype.h"
#include "common/shared_memory.h"
#include "gtest/gtest.h"
#include "server/shared_regions.h"
#include "tests/server/server_test_util.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

using testing::Fp32Piece;
using testing::GatherBytes;
using testing::GatherFp32;
using testing::Header;
using testing::Inspect;
using testing::InitServer;
using testing::MakeInit;
using testing::SmallManifest;
using testing::StartServer;
using testing::TestServer;

TEST(SharedMemoryTest, AttachSeesTheServersBytesAndChecksWhatItOpens) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> made =
      SharedMemory::Create(3 * 4096);
  ASSERT_TRUE(made.ok()) << made.status();
  SharedMemory& server = **made;
  const int64_t pid = ::getpid();
  absl::StatusOr<std::unique_ptr<SharedMemory>> client =
      SharedMemory::Attach(pid, server.fd(), server.size(), server.nonce());
  ASSERT_TRUE(client.ok()) << client.status();
  std::mt19937 rng(std::random_device{}());
  for (size_t i = SharedMemory::kDataOffset; i < server.size(); ++i) {
    server.data()[i] = static_cast<uint8_t>(rng());
  }
  EXPECT_EQ(std::memcmp((*client)->data(), server.data(), server.size()), 0);
  (*client)->data()[5000] ^= 0xff;
  EXPECT_EQ((*client)->data()[5000], server.data()[5000]);

  std::string wrong = server.nonce();
  wrong[3] ^= 1;
  absl::StatusOr<std::unique_ptr<SharedMemory>> bad =
      SharedMemory::Attach(pid, server.fd(), server.size(), wrong);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("nonce"), std::string::npos);
  bad = SharedMemory::Attach(pid, server.fd(), server.size() + 4096,
                             server.nonce());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  bad = SharedMemory::Attach(pid, 1 << 20, server.size(), server.nonce());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("cannot open"), std::string::npos);
  bad = SharedMemory::Attach(0, server.fd(), server.size(), server.nonce());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemory::Create(4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Sealed: the file can be neither shrunk nor grown.
  EXPECT_NE(::ftruncate(server.fd(), 4096), 0);
  EXPECT_NE(::ftruncate(server.fd(), 8 * 4096), 0);
}

TEST(SharedRegionsTest, LimitsIdsAndSpans) {
  SharedRegions regions;
  const size_t max = 64 * 1024;
  const size_t total = SharedRegions::kMaxRegions * 8192;
  EXPECT_EQ(regions.Open(4096, max, total).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(regions.Open(max + 1, max, total).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < SharedRegions::kMaxRegions; ++i) {
    absl::StatusOr<SharedRegions::Opened> r = regions.Open(8192, max, total);
    ASSERT_TRUE(r.ok()) << r.status();
    ids.push_back(r->id);
  }
  EXPECT_EQ(regions.bytes(), total);
  // The count, then the bytes.
  absl::StatusOr<SharedRegions::Opened> over = regions.Open(8192, max, 1 << 30);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(regions.Close(ids[7]).ok());
  EXPECT_EQ(regions.Close(ids[7]).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.Find(ids[7]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.bytes(), total - 8192);
  over = regions.Open(8192 + 64, max, total);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("limit of"), std::string::npos);
  ASSERT_TRUE(regions.Open(8192, max, total).ok());

  absl::StatusOr<std::shared_ptr<SharedMemory>> m = regions.Find(ids[0]);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(SharedRegions::Span(**m, 4096, 4096, "t").ok());
  EXPECT_FALSE(SharedRegions::Span(**m, 4095, 8, "t").ok());
  EXPECT_FALSE(SharedRegions::Span(**m, 4096, 4097, "t").ok());
  EXPECT_FALSE(SharedRegions::Span(**m, 8192, 1, "t").ok());
  EXPECT_FALSE(SharedRegions::Span(**m, ~uint64_t{0} - 2, 8, "t").ok());
  EXPECT_FALSE(SharedRegions::Span(**m, 5000, ~uint64_t{0} - 2, "t").ok());
}

// A client that dies without closing its region (a worker killed and
// restarted) leaves it only until the next OpenRegion: Attach records the
// client's pid in the region, and Open first frees the regions whose
// client no longer exists. One never attached (pid 0) and one whose
// client lives stay.
TEST(SharedRegionsTest, ARegionWhoseClientExitedIsFreedByTheNextOpen) {
  SharedRegions regions;
  const size_t max = 64 * 1024, total = 1 << 20;
  std::vector<SharedRegions::Opened> opened;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<SharedRegions::Opened> r = regions.Open(8192, max, total);
    ASSERT_TRUE(r.ok()) << r.status();
    opened.push_back(*r);
  }
  std::vector<std::unique_ptr<SharedMemory>> clients;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<SharedMemory>> c = SharedMemory::Attach(
        ::getpid(), opened[i].memory->fd(), 8192, opened[i].memory->nonce());
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(*std::move(c));
    EXPECT_EQ(opened[i].memory->client_pid(), ::getpid());
  }
  EXPECT_EQ(opened[2].memory->client_pid(), 0);
  // Region 1's client "exits": a child's pid, once the child is reaped.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  std::memcpy(clients[1]->data() + SharedMemory::kClientPidOffset, &child,
              sizeof(int32_t));
  EXPECT_EQ(opened[1].memory->client_pid(), child);
  const uint64_t freed_id = opened[1].id;
  opened.clear();  // the regions hold their own references
  clients.clear();
  EXPECT_EQ(regions.size(), 3u);
  ASSERT_TRUE(regions.Open(8192, max, total).ok());
  EXPECT_EQ(regions.size(), 3u);
  EXPECT_EQ(regions.bytes(), 3 * 8192u);
  EXPECT_EQ(regions.Find(freed_id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.FreeOrphans(), 0u);
}

std::unique_ptr<ShardClient> ClientOf(const TestServer& t,
                                      const FlatLayout& layout) {
  ShardClientOptions o;
  o.run_id = testing::kTestRunId;
  absl::StatusOr<std::unique_ptr<ShardClient>> c = ShardClient::Create(
      {absl::StrCat("127.0.0.1:", t.server->port())}, layout, o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::vector<uint8_t> Gather(ShardClient& c, const std::vector<FlatRange>& r,
                            DType dtype) {
  size_t n = 0;
  for (const FlatRange& x : r) n += x.size();
  std::vector<uint8_t> out(n * DTypeSize(dtype), 0xEE);
  absl::StatusOr<GatherResult> g =
      c.Gather(r, dtype, -1, out.data(), out.size());
  EXPECT_TRUE(g.ok()) << g.status();
  return out;
}

// Two servers with the same Init; one client through a region, one over
// gRPC alone; the same pushes (applied at once, buffered until a commit,
// prepared for ApplyStep, BF16) and gathers. The region is sized for the
// whole range, or for a third of it: then a push's later pieces and the
// larger gathers go over gRPC (in the same stream, for the push).
class SharedRegionRpcTest : public ::testing::TestWithParam<int> {};

TEST_P(SharedRegionRpcTest, PushAndGatherEqualTheGrpcPathBitForBit) {
  const v1::ModelManifest manifest = SmallManifest(1);
  absl::StatusOr<FlatLayout> made = FlatLayout::Create(FromProto(manifest), 1, 1);
  ASSERT_TRUE(made.ok());
  const FlatLayout layout = *made;
  TestServer a = StartServer(0, 1), b = StartServer(0, 1);
  ASSERT_NE(a.stub, nullptr);
  ASSERT_NE(b.stub, nullptr);
  ASSERT_TRUE(InitServer(*a.stub, MakeInit(manifest, 1, 0, 7, 1024)).ok());
  ASSERT_TRUE(InitServer(*b.stub, MakeInit(manifest, 1, 0, 7, 1024)).ok());
  std::unique_ptr<ShardClient> shm = ClientOf(a, layout);
  std::unique_ptr<ShardClient> rpc = ClientOf(b, layout);
  ASSERT_NE(shm, nullptr);
  ASSERT_NE(rpc, nullptr);
  const uint64_t total = layout.total_elems();
  std::string why;
  absl::StatusOr<int> attached =
      shm->AttachSharedMemory({{0, total / GetParam()}}, &why);
  ASSERT_TRUE(attached.ok()) << attached.status();
  ASSERT_EQ(*attached, 1) << why;

  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.f, 1.f);
  // Ranges out of order and split, so that pieces land in the middle of
  // both areas.
  const std::vector<FlatRange> ranges = {
      {total / 2, total}, {0, total / 3}, {total / 3, total / 2}};
  for (uint64_t step = 0; step < 4; ++step) {
    const DType dtype = step == 3 ? DType::kBf16 : DType::kFp32;
    std::vector<uint8_t> grad(total * DTypeSize(dtype));
    for (uint64_t i = 0; i < total; ++i) {
      const float g = normal(rng);
      if (dtype == DType::kFp32) {
        std::memcpy(grad.data() + 4 * i, &g, 4);
      } else {
        const uint16_t h = FloatToBf16(g);
        std::memcpy(grad.data() + 2 * i, &h, 2);
      }
    }
    std::vector<GradSpan> spans;
    for (const FlatRange& r : ranges) {
      spans.push_back({r, dtype, grad.data() + r.begin * DTypeSize(dtype)});
    }
    const StepCommit commit{0.5, false, /*prepare=*/step == 2};
    const bool known = step == 0;
    for (ShardClient* c : {shm.get(), rpc.get()}) {
      absl::StatusOr<PushResult> p = c->PushGrad(step, 0, spans, commit, known);
      ASSERT_TRUE(p.ok()) << p.status();
      if (commit.prepare) {
        v1::ApplyStepRequest req;
        req.set_step(step);
        req.set_run_id(testing::kTestRunId);
        v1::ApplyStepResponse resp;
        grpc::ClientContext ctx;
        testing::SetDeadline(ctx, 20000);
        v1::ShardService::Stub& stub = c == shm.get() ? *a.stub : *b.stub;
        ASSERT_TRUE(stub.ApplyStep(&ctx, req, &resp).ok());
      }
    }
    for (DType t : {DType::kFp32, DType::kBf16}) {
      for (const std::vector<FlatRange>& r :
           {ranges, std::vector<FlatRange>{{total / 3 - 7, total / 3}, {0, 5}}}) {
        const std::vector<uint8_t> x = Gather(*shm, r, t);
        const std::vector<uint8_t> y = Gather(*rpc, r, t);
        ASSERT_EQ(x.size(), y.size());
        EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0)
            << "step " << step << " " << DTypeName(t);
      }
    }
  }
  const v1::InspectResponse ia = Inspect(*a.stub), ib = Inspect(*b.stub);
  EXPECT_EQ(ia.adam_step(), 4u);
  EXPECT_EQ(ia.norms().master(), ib.norms().master());
  EXPECT_EQ(ia.norms().exp_avg_sq(), ib.norms().exp_avg_sq());
  EXPECT_EQ(ia.counters().calls().at("OpenRegion"), 1u);
  // The same payload, counted as received and sent, whichever the path.
  EXPECT_EQ(ia.counters().bytes_in(), ib.counters().bytes_in());
  EXPECT_EQ(ia.counters().bytes_out(), ib.counters().bytes_out());
  shm->DetachSharedMemory();
  EXPECT_EQ(Inspect(*a.stub).counters().calls().at("CloseRegion"), 1u);
  // Over gRPC again: still equal.
  const std::vector<uint8_t> x = Gather(*shm, ranges, DType::kFp32);
  EXPECT_EQ(x, Gather(*rpc, ranges, DType::kFp32));
}

INSTANTIATE_TEST_SUITE_P(WholeAndThird, SharedRegionRpcTest,
                         ::testing::Values(1, 3));

// Regions beyond a server's limit are refused, and the client stays on
// gRPC, saying why.
TEST(SharedRegionLimitTest, AClientPastTheServersLimitStaysOnGrpc) {
  const v1::ModelManifest manifest = SmallManifest(1);
  absl::StatusOr<FlatLayout> made = FlatLayout::Create(FromProto(manifest), 1, 1);
  ASSERT_TRUE(made.ok());
  TestServer t = StartServer(0, 1);
  ASSERT_NE(t.stub, nullptr);
  ASSERT_TRUE(InitServer(*t.stub, MakeInit(manifest, 1, 0, 7, 1024)).ok());
  const FlatRange all{0, made->total_elems()};
  std::vector<std::unique_ptr<ShardClient>> clients;
  std::string why;
  // Whole-range regions, until the server's limit (twice one of them, plus
  // a page for each region it may hold) refuses one: bounded by the count.
  for (size_t i = 0; i <= SharedRegions::kMaxRegions && why.empty(); ++i) {
    clients.push_back(ClientOf(t, *made));
    ASSERT_NE(clients.back(), nullptr);
    absl::StatusOr<int> n = clients.back()->AttachSharedMemory({all}, &why);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, why.empty() ? 1 : 0);
  }
  ASSERT_GE(clients.size(), 3u);
  EXPECT_NE(why.find("limit"), std::string::npos) << why;
  // The last gathers over gRPC what the first gathers through its region.
  const std::vector<uint8_t> x = Gather(*clients.back(), {all}, DType::kFp32);
  EXPECT_EQ(x, Gather(*clients[0], {all}, DType::kFp32));
  clients[0]->DetachSharedMemory();
  absl::StatusOr<int> n = clients.back()->AttachSharedMemory({all}, &why);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
}

grpc::Status OpenRegion(v1::ShardService::Stub& stub, uint64_t bytes,
                        const std::string& run_id,
                        v1::OpenRegionResponse* out) {
  v1::OpenRegionRequest req;
  req.set_bytes(bytes);
  req.set_run_id(run_id);
  grpc::ClientContext ctx;
  testing::SetDeadline(ctx, 20000);
  return stub.OpenRegion(&ctx, req, out);
}

grpc::Status PushRegionPiece(v1::ShardService::Stub& stub, uint64_t region,
                             uint64_t offset, uint64_t region_offset,
                             uint64_t bytes) {
  grpc::ClientContext ctx;
  testing::SetDeadline(ctx, 20000);
  v1::PushGradResponse resp;
  auto w = stub.PushGrad(&ctx, &resp);
  v1::PushGradMessage m;
  *m.mutable_header() = Header(0);
  m.mutable_header()->set_coefficient_known(true);
  m.mutable_header()->set_coefficient(1.0);
  w->Write(m);
  m.Clear();
  v1::PushGradRegionPiece* p = m.mutable_region_piece();
  p->set_offset(offset);
  p->set_dtype(v1::DTYPE_FP32);
  p->set_region(region);
  p->set_region_offset(region_offset);
  p->set_bytes(bytes);
  w->Write(m);
  w->WritesDone();
  return w->Finish();
}

TEST(SharedRegionRpcTest, BadRegionRequestsAreRefusedAndChangeNothing) {
  const v1::ModelManifest manifest = SmallManifest(1);
  TestServer t = StartServer(0, 1);
  ASSERT_NE(t.stub, nullptr);
  v1::OpenRegionResponse opened;
  EXPECT_EQ(OpenRegion(*t.stub, 8192, testing::kTestRunId, &opened)
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);  // before Init
  ASSERT_TRUE(InitServer(*t.stub, MakeInit(manifest, 1, 0, 7, 1024)).ok());
  const v1::InspectResponse info = Inspect(*t.stub);
  const uint64_t owned = info.owned_end() - info.owned_begin();
  const uint64_t max = SharedMemory::kDataOffset + 8 * owned;
  EXPECT_EQ(OpenRegion(*t.stub, 8192, "", &opened).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  grpc::Status s = OpenRegion(*t.stub, max + 1, testing::kTestRunId, &opened);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("at most"), std::string::npos);
  EXPECT_EQ(OpenRegion(*t.stub, max, "another-run", &opened).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(OpenRegion(*t.stub, max, testing::kTestRunId, &opened).ok());
  EXPECT_EQ(opened.bytes(), max);
  EXPECT_EQ(opened.nonce().size(), SharedMemory::kNonceBytes);

  const FlatRange all{info.owned_begin(), info.owned_end()};
  const std::vector<float> before = GatherFp32(*t.stub, all);
  // An unknown region, bytes past the region's end, bytes in its nonce page.
  s = PushRegionPiece(*t.stub, opened.region() + 1, 0, 4096, 64);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  s = PushRegionPiece(*t.stub, opened.region(), 0, max - 32, 64);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("not inside the region"), std::string::npos);
  s = PushRegionPiece(*t.stub, opened.region(), 0, 0, 64);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A piece outside the owned range, from inside the region.
  s = PushRegionPiece(*t.stub, opened.region(), owned, 4096, 64);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A Gather whose elements would not fit after region_offset.
  v1::GatherRequest g;
  v1::FlatRange* r = g.add_ranges();
  r->set_offset(0);
  r->set_length(owned);
  g.set_dtype(v1::DTYPE_FP32);
  g.set_min_version(-1);
  g.set_region(opened.region());
  g.set_region_offset(max - 4 * owned + 4);
  {
    grpc::ClientContext ctx;
    testing::SetDeadline(ctx, 20000);
    auto reader = t.stub->Gather(&ctx, g);
    v1::GatherChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(GatherFp32(*t.stub, all), before);
  const v1::InspectResponse after = Inspect(*t.stub);
  EXPECT_EQ(after.max_version(), 0u);
  EXPECT_EQ(after.adam_step(), 0u);
  EXPECT_EQ(after.bytes_by_kind().at("pending_grads"), 0u);

  v1::CloseRegionRequest close;
  close.set_region(opened.region());
  v1::CloseRegionResponse closed;
  for (grpc::StatusCode want :
       {grpc::StatusCode::OK, grpc::StatusCode::NOT_FOUND}) {
    grpc::ClientContext ctx;
    testing::SetDeadline(ctx, 20000);
    EXPECT_EQ(t.stub->CloseRegion(&ctx, close, &closed).error_code(), want);
  }
  // A push naming the closed region.
  s = PushRegionPiece(*t.stub, opened.region(), 0, 4096, 64);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

// A push prepared from a region is the values the region held when the
// prepare was answered: the client may reuse its push area at once (for
// its next push), so the server copies a prepared piece. Here the client
// overwrites the area with NaN between the prepare's reply and ApplyStep;
// the step applied equals the same push prepared over gRPC, bit for bit.
TEST(SharedRegionRpcTest, APreparedPushIsTheBytesTheRegionHeldAtItsReply) {
  const v1::ModelManifest manifest = SmallManifest(1);
  TestServer a = StartServer(0, 1), b = StartServer(0, 1);
  ASSERT_NE(a.stub, nullptr);
  ASSERT_NE(b.stub, nullptr);
  ASSERT_TRUE(InitServer(*a.stub, MakeInit(manifest, 1, 0, 7, 1024)).ok());
  ASSERT_TRUE(InitServer(*b.stub, MakeInit(manifest, 1, 0, 7, 1024)).ok());
  const v1::InspectResponse info = Inspect(*a.stub);
  const FlatRange all{info.owned_begin(), info.owned_end()};
  const uint64_t owned = all.size();
  v1::OpenRegionResponse opened;
  ASSERT_TRUE(OpenRegion(*a.stub, SharedMemory::kDataOffset + 4 * owned,
                         testing::kTestRunId, &opened)
                  .ok());
  absl::StatusOr<std::unique_ptr<SharedMemory>> mapped = SharedMemory::Attach(
      opened.pid(), opened.fd(), opened.bytes(), opened.nonce());
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  uint8_t* area = (*mapped)->data() + opened.data_offset();

  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> grad(owned);
  for (float& g : grad) g = normal(rng);
  std::memcpy(area, grad.data(), 4 * owned);
  {
    grpc::ClientContext ctx;
    testing::SetDeadline(ctx, 20000);
    v1::PushGradResponse resp;
    auto w = a.stub->PushGrad(&ctx, &resp);
    v1::PushGradMessage m;
    *m.mutable_header() = Header(0);
    ASSERT_TRUE(w->Write(m));
    m.Clear();
    v1::PushGradRegionPiece* p = m.mutable_region_piece();
    p->set_offset(all.begin);
    p->set_dtype(v1::DTYPE_FP32);
    p->set_region(opened.region());
    p->set_region_offset(opened.data_offset());
    p->set_bytes(4 * owned);
    ASSERT_TRUE(w->Write(m));
    m.Clear();
    m.mutable_commit()->set_coefficient(0.5);
    m.mutable_commit()->set_prepare(true);
    ASSERT_TRUE(w->Write(m));
    w->WritesDone();
    const grpc::Status st = w->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  // The prepare is answered: the client reuses its area.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (uint64_t i = 0; i < owned; ++i) std::memcpy(area + 4 * i, &nan, 4);
  ASSERT_TRUE(testing::Push(*b.stub, Header(0), {Fp32Piece(all.begin, grad)},
                            0.5, false, nullptr, /*prepare=*/true)
                  .ok());
  for (v1::ShardService::Stub* stub : {a.stub.get(), b.stub.get()}) {
    v1::ApplyStepRequest req;
    req.set_step(0);
    req.set_run_id(testing::kTestRunId);
    v1::ApplyStepResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(ctx, 20000);
    const grpc::Status st = stub->ApplyStep(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const std::vector<float> x = GatherFp32(*a.stub, all);
  const std::vector<float> y = GatherFp32(*b.stub, all);
  ASSERT_EQ(x.size(), owned);
  ASSERT_EQ(x.size(), y.size());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), 4 * owned), 0)
      << "the step applied the region's bytes at ApplyStep, not at the "
         "prepare's reply";
  EXPECT_EQ(Inspect(*a.stub).adam_step(), 1u);
}

}  // namespace
}  // namespace zeroshard
