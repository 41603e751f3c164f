// ShardClient and PushSession against FakeShardService: routing, piece
// sizes, payload integrity, and the retry rule (UNAVAILABLE retried, ABORTED
// and DEADLINE_EXCEEDED not).
#include "client/shard_client.h"
#include "client/shard_cluster.h"

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_service.h"

namespace zeroshard {
namespace {

using testing::FakeShardCluster;
using testing::FakeValue;

FlatLayout TestLayout(uint32_t servers) {
  ModelManifest m;
  m.partition_count = 2;
  m.units = {{"a", {{"a.w", {1000, 3}}, {"a.b", {3}}}},
             {"b", {{"b.w", {777}}}},
             {"c", {{"c.w", {50, 100}}}}};
  return *FlatLayout::Create(m, servers, 2);
}

ShardClientOptions SmallMessages() {
  ShardClientOptions o;
  o.max_message_bytes = 4096;
  o.call_timeout = absl::Seconds(20);
  // Short enough to keep the tests fast, long enough (~1.5 s over 8 tries)
  // to ride out a slow first connect on a loaded machine.
  o.retry.max_attempts = 8;
  o.retry.initial_backoff = absl::Milliseconds(10);
  o.retry.max_backoff = absl::Milliseconds(500);
  return o;
}

TEST(ShardClientTest, GatherConcatenatesRangesAcrossServers) {
  FlatLayout layout = TestLayout(3);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  const uint64_t T = layout.total_elems();
  std::mt19937_64 rng(11);
  for (DType dtype : {DType::kFp32, DType::kBf16}) {
    // Three disjoint ranges, the middle one spanning every server.
    const uint64_t a = rng() % 100, b = a + 1 + rng() % 500;
    const std::vector<FlatRange> ranges = {{b + 10, T - 7}, {a, b}, {T - 5, T}};
    uint64_t elems = 0;
    for (const auto& r : ranges) elems += r.size();
    std::vector<uint8_t> out(elems * DTypeSize(dtype), 0xAB);
    auto res = client->Gather(ranges, dtype, 0, out.data(), out.size());
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_EQ(res->bytes, out.size());
    uint64_t at = 0;
    for (const auto& r : ranges) {
      for (uint64_t off = r.begin; off < r.end; ++off, ++at) {
        float got;
        if (dtype == DType::kFp32) {
          std::memcpy(&got, &out[at * 4], 4);
          ASSERT_EQ(got, FakeValue(off)) << "offset " << off;
        } else {
          uint16_t h;
          std::memcpy(&h, &out[at * 2], 2);
          ASSERT_EQ(h, FloatToBf16(FakeValue(off))) << "offset " << off;
        }
      }
    }
  }
}

// A reply is not trusted: a piece whose end wraps past 2^64, or a piece
// sent twice in place of another (the element count still adds up), is
// DATA_LOSS, not a write out of bounds or a silent hole.
TEST(ShardClientTest, GatherRejectsWrappingAndDuplicatePieces) {
  FlatLayout layout = TestLayout(1);
  FakeShardCluster cluster(layout);
  ShardClientOptions o = SmallMessages();  // 4096-byte pieces: 1024 FP32
  auto client = *ShardClient::Create(cluster.addresses(), layout, o);
  const std::vector<FlatRange> ranges = {{0, 4096}};
  std::vector<uint8_t> out(4096 * 4);
  for (int fault = 0; fault < 2; ++fault) {
    SCOPED_TRACE(fault == 0 ? "wrapping offset" : "duplicate piece");
    cluster.server(0).gather_wrapping_offset = fault == 0;
    cluster.server(0).gather_duplicate = fault == 1;
    auto res = client->Gather(ranges, DType::kFp32, 0, out.data(), out.size());
    ASSERT_FALSE(res.ok());
    EXPECT_EQ(res.status().code(), absl::StatusCode::kDataLoss) << res.status();
  }
  cluster.server(0).gather_wrapping_offset = false;
  cluster.server(0).gather_duplicate = false;
  auto res = client->Gather(ranges, DType::kFp32, 0, out.data(), out.size());
  ASSERT_TRUE(res.ok()) << res.status();
}

TEST(ShardClientTest, GatherRejectsBadRequests) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  std::vector<float> out(100);
  const uint64_t T = layout.total_elems();
  EXPECT_EQ(client->Gather({{FlatRange{T - 10, T + 90}}}, DType::kFp32, 0,
                           out.data(), 400).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Gather({{FlatRange{0, 60}, FlatRange{50, 90}}},
                           DType::kFp32, 0, out.data(), 400).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Gather({{FlatRange{0, 100}}}, DType::kFp32, 0, out.data(),
                           399).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Gather({{FlatRange{0, 100}}}, DType::kFp16, 0, out.data(),
                           200).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster.server(0).gather_calls + cluster.server(1).gather_calls, 0);
}

TEST(ShardClientTest, PushRoutesEveryElementOnceWithCommitLast) {
  FlatLayout layout = TestLayout(3);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  std::vector<FlatRange> ranges = layout.WorkerRanges(1);
  std::vector<std::vector<float>> data;
  std::vector<GradSpan> spans;
  for (const FlatRange& r : ranges) {
    data.emplace_back(r.size());
    for (uint64_t i = 0; i < r.size(); ++i) data.back()[i] = r.begin + i + 0.5f;
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    spans.push_back({ranges[i], DType::kFp32, data[i].data()});
  }
  auto res = client->PushGrad(7, 1, spans, {0.25, false}, false);
  ASSERT_TRUE(res.ok()) << res.status();
  uint64_t want = 0;
  for (const auto& r : ranges) want += r.size();
  EXPECT_EQ(res->applied_elems, want);
  uint64_t seen = 0;
  for (int k = 0; k < 3; ++k) {
    for (const auto& push : cluster.server(k).pushes()) {
      EXPECT_EQ(push.header.step(), 7u);
      EXPECT_EQ(push.header.worker(), 1u);
      EXPECT_FALSE(push.header.coefficient_known());
      EXPECT_TRUE(push.committed);
      EXPECT_EQ(push.commit.coefficient(), 0.25);
      for (const auto& p : push.pieces) {
        EXPECT_LE(p.data().size(), 4096u);
        const uint64_t n = p.data().size() / 4;
        EXPECT_TRUE(layout.ServerRange(k).Contains({p.offset(), p.offset() + n}));
        for (uint64_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, p.data().data() + 4 * i, 4);
          ASSERT_EQ(v, p.offset() + i + 0.5f);
        }
        seen += n;
      }
    }
  }
  EXPECT_EQ(seen, want);
}

TEST(ShardClientTest, SessionSendsAddsAsTheyComeWithKnownCoefficient) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  const uint64_t T = layout.total_elems();
  std::vector<uint16_t> g(T);
  for (uint64_t i = 0; i < T; ++i) g[i] = FloatToBf16(i * 1e-3f);
  auto session = *client->OpenPush(3, 0, StepCommit{0.5, true});
  ASSERT_TRUE(session->Add({T / 2, T}, DType::kBf16, g.data() + T / 2).ok());
  ASSERT_TRUE(session->Add({0, T / 2}, DType::kBf16, g.data()).ok());
  EXPECT_EQ(session->Add({10, 20}, DType::kBf16, g.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->Commit({0.5, false}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto res = session->Commit({0.5, true});
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->applied_elems, T);
  EXPECT_EQ(res->streams, 2);
  EXPECT_EQ(session->Add({0, 1}, DType::kBf16, g.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  for (int k = 0; k < 2; ++k) {
    auto pushes = cluster.server(k).pushes();
    ASSERT_EQ(pushes.size(), 1u);
    EXPECT_TRUE(pushes[0].header.coefficient_known());
    EXPECT_TRUE(pushes[0].header.skip());
    EXPECT_FALSE(pushes[0].committed);
  }
}

// SendCommit + Wait is Commit in two halves; Wait needs a sent commit.
TEST(ShardClientTest, SendCommitThenWaitEqualsCommit) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  const uint64_t T = layout.total_elems();
  std::vector<float> g(T, 0.25f);
  auto session = *client->OpenPush(4, 1);
  ASSERT_TRUE(session->Add({0, T}, DType::kFp32, g.data()).ok());
  EXPECT_EQ(session->Wait().status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(session->SendCommit({0.5, false}).ok());
  EXPECT_EQ(session->SendCommit({0.5, false}).code(),
            absl::StatusCode::kFailedPrecondition);
  auto res = session->Wait();
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->applied_elems, T);
  EXPECT_EQ(res->streams, 2);
  EXPECT_EQ(session->Wait().status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (int k = 0; k < 2; ++k) {
    auto pushes = cluster.server(k).pushes();
    ASSERT_EQ(pushes.size(), 1u);
    EXPECT_TRUE(pushes[0].committed);
    EXPECT_EQ(pushes[0].header.step(), 4u);
  }
}

// The session's refusals that send nothing: null data, a coefficient that
// is not finite or negative (the session stays usable), and everything
// after Abort; an aborted or destroyed uncommitted session commits nothing
// on any server.
TEST(ShardClientTest, SessionRefusalsAndAbortCommitNothing) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  const uint64_t T = layout.total_elems();
  std::vector<float> g(T, 0.5f);
  {
    auto session = *client->OpenPush(0, 0);
    EXPECT_EQ(session->Add({0, T}, DType::kFp32, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(session->Add({0, T}, DType::kFp32, g.data()).ok());
    for (double bad : {std::nan(""), HUGE_VAL, -0.5}) {
      EXPECT_EQ(session->SendCommit({bad, false}).code(),
                absl::StatusCode::kInvalidArgument)
          << bad;
    }
    session->Abort();
    session->Abort();  // idempotent
    EXPECT_EQ(session->Add({0, 1}, DType::kFp32, g.data()).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(session->Commit({1.0, false}).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(session->Wait().status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  {
    auto session = *client->OpenPush(0, 1);
    ASSERT_TRUE(session->Add({0, T}, DType::kFp32, g.data()).ok());
  }  // destroyed uncommitted: aborted
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(cluster.server(k).pushes().empty())
        << "server " << k << " recorded a finished push";
  }
  // The invalid commits above did not spoil a session: a valid one goes
  // through.
  auto session = *client->OpenPush(0, 2);
  ASSERT_TRUE(session->Add({0, T}, DType::kFp32, g.data()).ok());
  EXPECT_EQ(session->Commit({-1.0, false}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto res = session->Commit({1.0, false});
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->applied_elems, T);
}

// A CallCanceller ends a Gather that is waiting on the server with
// CANCELLED (not retried), and refuses to start one once cancelled until it
// is Reset.
TEST(ShardClientTest, CancelledGatherEndsPromptlyAndIsNotRetried) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  ShardClientOptions opt = SmallMessages();
  opt.call_timeout = absl::Seconds(120);
  auto client = *ShardClient::Create(cluster.addresses(), layout, opt);
  const uint64_t T = layout.total_elems();
  std::vector<float> out(T);
  cluster.server(0).gather_delay_ms = 60000;
  CallCanceller cancel;
  absl::Status result;
  std::thread caller([&] {
    result = client->Gather({{FlatRange{0, T}}}, DType::kFp32, 0, out.data(),
                            out.size() * 4, &cancel)
                 .status();
  });
  // Wait (bounded) until server 0 is inside the call, then cancel.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (cluster.server(0).gather_calls < 1 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(cluster.server(0).gather_calls, 1);
  const absl::Time t0 = absl::Now();
  cancel.Cancel();
  caller.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
  // Well inside the 60 s the server would have held it (not a timing
  // assertion on speed: the alternative is a minute).
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30));
  EXPECT_EQ(cluster.server(0).gather_calls, 1);
  // Once cancelled, a call does not start at all.
  cluster.server(0).gather_delay_ms = 0;
  EXPECT_EQ(client
                ->Gather({{FlatRange{0, T}}}, DType::kFp32, 0, out.data(),
                         out.size() * 4, &cancel)
                .status()
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(cluster.server(0).gather_calls, 1);
  cancel.Reset();
  EXPECT_TRUE(client
                  ->Gather({{FlatRange{0, T}}}, DType::kFp32, 0, out.data(),
                           out.size() * 4, &cancel)
                  .ok());
}

TEST(ShardClientTest, UnavailableIsRetriedAndTheStreamResent) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  cluster.server(0).fail_unavailable = 2;
  cluster.server(1).fail_push_midway = 1;
  const uint64_t T = layout.total_elems();
  std::vector<float> g(T, 1.0f);
  auto res = client->PushGrad(0, 0, {{{0, T}, DType::kFp32, g.data()}},
                              {1.0, false}, false);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->applied_elems, T);
  EXPECT_EQ(cluster.server(0).push_calls, 3);
  EXPECT_EQ(cluster.server(1).push_calls, 2);
  // The completed push on server 1 is the whole stream again.
  auto pushes = cluster.server(1).pushes();
  ASSERT_EQ(pushes.size(), 1u);
  uint64_t n = 0;
  for (const auto& p : pushes[0].pieces) n += p.data().size() / 4;
  EXPECT_EQ(n, layout.ServerRange(1).size());

  cluster.server(1).fail_unavailable = 1;
  std::vector<float> out(T);
  auto gathered = client->Gather({{FlatRange{0, T}}}, DType::kFp32, -1,
                                 out.data(), 4 * T);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(cluster.server(1).gather_calls, 2);
}

TEST(ShardClientTest, AbortedIsNotRetriedAndNamesTheServer) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  auto client = *ShardClient::Create(cluster.addresses(), layout, SmallMessages());
  cluster.server(1).abort_pushes = true;
  const uint64_t T = layout.total_elems();
  std::vector<float> g(T, 1.0f);
  auto res = client->PushGrad(5, 0, {{{0, T}, DType::kFp32, g.data()}},
                              {1.0, false}, false);
  ASSERT_EQ(res.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(res.status().message().find(cluster.addresses()[1]),
            std::string::npos) << res.status();
  EXPECT_EQ(cluster.server(1).push_calls, 1);
}

TEST(ShardClientTest, DeadlineIsHonouredAndNotRetried) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  ShardClientOptions opt = SmallMessages();
  opt.call_timeout = absl::Milliseconds(200);
  auto client = *ShardClient::Create(cluster.addresses(), layout, opt);
  std::vector<float> out(64);
  // Connect first: on a loaded machine the first connect alone can take
  // most of 200 ms, and the call would then time out before the server saw
  // it. Retried if the first connect is slow enough to hit the deadline.
  const absl::Time warm_limit = absl::Now() + absl::Seconds(20);
  while (!client->Gather({{FlatRange{0, 64}}}, DType::kFp32, 0, out.data(),
                         out.size() * 4).ok() &&
         absl::Now() < warm_limit) {
  }
  const int warm_calls = cluster.server(0).gather_calls;
  ASSERT_GE(warm_calls, 1);
  cluster.server(0).gather_delay_ms = 10000;
  const absl::Time t0 = absl::Now();
  auto res = client->Gather({{FlatRange{0, 64}}}, DType::kFp32, 0, out.data(),
                            out.size() * 4);
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded)
      << res.status();
  // Honoured: not before the deadline, and long before the server's 10 s
  // reply (a retry would take another 200 ms; the slack is for a loaded
  // machine).
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(3)) << absl::FormatDuration(took);
  // The server counts the call in its handler, which may run after the
  // client's deadline fired: wait (bounded) for it to show.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while (cluster.server(0).gather_calls < warm_calls + 1 &&
         absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(cluster.server(0).gather_calls, warm_calls + 1);
}

TEST(ShardClientTest, UnreachableServerGivesUnavailableAfterBoundedRetries) {
  FlatLayout layout = TestLayout(2);
  FakeShardCluster cluster(layout);
  std::vector<std::string> addresses = cluster.addresses();
  addresses[1] = absl::StrCat("127.0.0.1:", testing::UnusedPort());
  ShardClientOptions opt = SmallMessages();
  opt.retry.max_attempts = 3;
  auto client = *ShardClient::Create(addresses, layout, opt);
  const uint64_t T = layout.total_elems();
  std::vector<float> g(T, 1.0f);
  const absl::Time t0 = absl::Now();
  auto res = client->PushGrad(0, 0, {{{0, T}, DType::kFp32, g.data()}},
                              {1.0, false}, false);
  const absl::Duration took = absl::Now() - t0;
  ASSERT_EQ(res.status().code(), absl::StatusCode::kUnavailable);
  // Bounded: 3 attempts with backoffs of at most 500 ms (a refused connect
  // fails at once), far below the 20 s call timeout.
  EXPECT_LT(took, absl::Seconds(5)) << absl::FormatDuration(took);
  EXPECT_NE(res.status().message().find(addresses[1]), std::string::npos);
  EXPECT_NE(res.status().message().find("3 attempts"), std::string::npos)
      << res.status();
}

TEST(ShardClientTest, InitSendsEachServerItsIndexAndChecksRanges) {
  FlatLayout layout = TestLayout(3);
  FakeShardCluster cluster(layout);
  ShardClientOptions options = SmallMessages();
  options.run_id = "run-7";
  auto client = *ShardClient::Create(cluster.addresses(), layout, options);
  InitOptions opt;
  opt.seed = 42;
  opt.num_workers = 1;
  ASSERT_TRUE(client->Init(opt).ok());
  for (int k = 0; k < 3; ++k) {
    auto inits = cluster.server(k).inits();
    ASSERT_EQ(inits.size(), 1u);
    EXPECT_EQ(inits[0].server_index(), static_cast<uint32_t>(k));
    EXPECT_EQ(inits[0].num_servers(), 3u);
    EXPECT_EQ(inits[0].init().seed(), 42u);
    EXPECT_EQ(inits[0].run_id(), "run-7");
    EXPECT_EQ(inits[0].num_workers(), 1u);
    EXPECT_EQ(inits[0].manifest().units_size(), 3);
  }
  cluster.server(2).misreport_range = true;
  EXPECT_EQ(client->Init(opt).status().code(),
            absl::StatusCode::kFailedPrecondition);
  opt.chunk_elems = 100;
  EXPECT_EQ(client->Init(opt).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardClientTest, CreateRejectsAMismatchedServerList) {
  FlatLayout layout = TestLayout(3);
  EXPECT_EQ(ShardClient::Create({"127.0.0.1:1"}, layout).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardClient::Create({"a", "b:1", "c:2"}, layout).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The public face: Init's replies in the project's types, and a cluster
// connected without a layout refusing what needs one before any call.
TEST(ShardClusterTest, InitRepliesAndLayoutlessRefusals) {
  FlatLayout layout = TestLayout(3);
  FakeShardCluster fakes(layout);
  ShardClientOptions options = SmallMessages();
  options.run_id = "run-9";
  auto cluster = ShardCluster::Connect(fakes.addresses(), options, layout);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_TRUE((*cluster)->has_layout());
  EXPECT_EQ((*cluster)->num_servers(), 3);
  InitOptions opt;
  opt.seed = 5;
  opt.num_workers = 1;
  auto inits = (*cluster)->Init(opt);
  ASSERT_TRUE(inits.ok()) << inits.status();
  ASSERT_EQ(inits->size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ((*inits)[k].owned, layout.ServerRange(k)) << k;
    EXPECT_EQ((*inits)[k].total_elems, layout.total_elems());
  }

  auto bare = ShardCluster::Connect(fakes.addresses(), options);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE((*bare)->has_layout());
  std::vector<float> out(4);
  const FlatRange r{0, 4};
  absl::StatusOr<GatherResult> g = (*bare)->Gather(
      {&r, 1}, DType::kFp32, 0, out.data(), out.size() * sizeof(float));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(g.status().message().find("Gather needs the model's layout"),
            absl::string_view::npos) << g.status();
  EXPECT_EQ((*bare)->Init(opt).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*bare)->SetMasterWeights(out).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*bare)->OpenKv({"run-9", 0}, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardCluster::Connect({"no-port"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardCluster::Connect({"127.0.0.1:1"}, options, layout)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
