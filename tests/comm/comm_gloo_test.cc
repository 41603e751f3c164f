// WorkerGroup on Gloo, ranks as threads of this process: results against a
// serial reference on fresh random data, and bounded failures.
#include <atomic>
#include <csignal>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rendezvous.h"
#include "gtest/gtest.h"
#include "tests/comm/comm_group_runner.h"
#include "comm/collectives.h"
#include "comm/gloo_collectives.h"

namespace zeroshard {
namespace {

// A fresh seed per run, printed so a failure can be replayed.
uint64_t FreshSeed() {
  static const uint64_t seed = [] {
    uint64_t s = std::random_device{}();
    std::printf("comm_gloo_test seed %llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// The bytes rank `rank` contributes in case `tag`, reproducible on any rank.
std::vector<uint8_t> RankBytes(uint64_t tag, int rank, size_t n) {
  std::mt19937_64 rng(FreshSeed() ^ (tag * 1000003 + rank));
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<float> RankFloats(uint64_t tag, int rank, size_t n) {
  std::mt19937_64 rng(FreshSeed() ^ (tag * 7919 + rank + 17));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  }
}

class GlooSizes : public ::testing::TestWithParam<int> {};

TEST_P(GlooSizes, AllGatherMatchesConcatenation) {
  const int n = GetParam();
  for (size_t part : {size_t{0}, size_t{1}, size_t{7}, size_t{1001},
                      size_t{131075}}) {
    SCOPED_TRACE(absl::StrCat("part ", part));
    const uint64_t tag = part * 10 + n;
    std::vector<uint8_t> expected;
    for (int r = 0; r < n; ++r) {
      auto b = RankBytes(tag, r, part);
      expected.insert(expected.end(), b.begin(), b.end());
    }
    ExpectAllOk(RunGroup("gloo", n, TestGroupOptions(), [&](WorkerGroup& g) {
      // Copying variant.
      std::vector<uint8_t> local = RankBytes(tag, g.rank(), part);
      std::vector<uint8_t> out(part * n, 0xEE);
      absl::Status s = g.AllGather(local, absl::MakeSpan(out));
      if (!s.ok()) return s;
      if (out != expected) return absl::InternalError("copying all-gather differs");
      // In-place variant: only this rank's slot is filled beforehand.
      std::vector<uint8_t> unit(part * n, 0xEE);
      std::copy(local.begin(), local.end(), unit.begin() + g.rank() * part);
      s = g.AllGatherInPlace(absl::MakeSpan(unit));
      if (!s.ok()) return s;
      if (unit != expected) return absl::InternalError("in-place all-gather differs");
      return absl::OkStatus();
    }));
  }
}

TEST_P(GlooSizes, ReduceScatterMatchesSerialSum) {
  const int n = GetParam();
  for (size_t part : {size_t{1}, size_t{5}, size_t{3333}, size_t{70001}}) {
    for (size_t segment : {size_t{256 * 1024}, size_t{1000}}) {
      const uint64_t tag = part * 100 + segment % 7 + n;
      const float scale = segment == 1000 ? 1.0f / n : 1.0f;
      // Serial reference in double, with the magnitude for the tolerance.
      std::vector<double> sum(part * n, 0.0), mag(part * n, 0.0);
      for (int r = 0; r < n; ++r) {
        auto v = RankFloats(tag, r, part * n);
        for (size_t i = 0; i < v.size(); ++i) {
          sum[i] += v[i];
          mag[i] += std::fabs(v[i]);
        }
      }
      InMemoryRendezvousStore store;
      GroupOptions options = TestGroupOptions();
      std::vector<absl::Status> statuses(n);
      std::vector<std::thread> threads;
      for (int rank = 0; rank < n; ++rank) {
        threads.emplace_back([&, rank] {
          auto g = GlooWorkerGroup::Create(rank, n, &store, options);
          if (!g.ok()) {
            statuses[rank] = g.status();
            return;
          }
          (*g)->set_segment_floats(segment);
          std::vector<float> in = RankFloats(tag, rank, part * n);
          const std::vector<float> in_copy = in;
          std::vector<float> out(part, NAN);
          // Twice: the second call reuses the scratch buffers.
          for (int rep = 0; rep < 2; ++rep) {
            statuses[rank] = (*g)->ReduceScatter(in, absl::MakeSpan(out), scale);
            if (!statuses[rank].ok()) return;
          }
          if (in != in_copy) {
            statuses[rank] = absl::InternalError("input modified");
            return;
          }
          for (size_t i = 0; i < part; ++i) {
            const size_t j = rank * part + i;
            const double want = sum[j] * scale;
            const double tol = 1e-6 * mag[j] * n + 1e-7;
            if (!(std::fabs(out[i] - want) <= tol)) {
              statuses[rank] = absl::InternalError(absl::StrCat(
                  "element ", i, ": got ", out[i], " want ", want));
              return;
            }
          }
        });
      }
      for (auto& t : threads) t.join();
      ExpectAllOk(statuses);
    }
  }
}

TEST_P(GlooSizes, AllReduceSmallVectorsInRankOrder) {
  const int n = GetParam();
  const size_t len = 37;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    const uint64_t tag = 500 + static_cast<int>(op) * 10 + n;
    // Serial references, reduced from rank 0 upward.
    std::vector<float> ref_f = RankFloats(tag, 0, len);
    std::vector<double> ref_d(len);
    std::vector<int64_t> ref_i(len);
    std::vector<uint64_t> ref_u(len);
    auto doubles = [&](int r) {
      auto f = RankFloats(tag + 1, r, len);
      return std::vector<double>(f.begin(), f.end());
    };
    auto ints = [&](int r) {
      auto b = RankBytes(tag, r, len * 8);
      std::vector<int64_t> v(len);
      std::memcpy(v.data(), b.data(), len * 8);
      return v;
    };
    auto reduce = [op](auto a, auto b) {
      if (op == ReduceOp::kMax) return std::max(a, b);
      if (op == ReduceOp::kMin) return std::min(a, b);
      return a + b;
    };
    ref_d = doubles(0);
    ref_i = ints(0);
    for (size_t i = 0; i < len; ++i) ref_u[i] = static_cast<uint64_t>(ref_i[i]);
    for (int r = 1; r < n; ++r) {
      auto f = RankFloats(tag, r, len);
      auto d = doubles(r);
      auto iv = ints(r);
      for (size_t i = 0; i < len; ++i) {
        ref_f[i] = reduce(ref_f[i], f[i]);
        ref_d[i] = reduce(ref_d[i], d[i]);
        const uint64_t u = static_cast<uint64_t>(iv[i]);
        if (op == ReduceOp::kSum) {
          ref_i[i] = static_cast<int64_t>(static_cast<uint64_t>(ref_i[i]) + u);
        } else {
          ref_i[i] = reduce(ref_i[i], iv[i]);
        }
        ref_u[i] = reduce(ref_u[i], u);
      }
    }
    ExpectAllOk(RunGroup("gloo", n, TestGroupOptions(), [&](WorkerGroup& g) {
      std::vector<float> f = RankFloats(tag, g.rank(), len);
      std::vector<double> d = doubles(g.rank());
      std::vector<int64_t> iv = ints(g.rank());
      std::vector<uint64_t> u(iv.begin(), iv.end());
      for (absl::Status s :
           {g.AllReduce(absl::MakeSpan(f), op), g.AllReduce(absl::MakeSpan(d), op),
            g.AllReduce(absl::MakeSpan(iv), op), g.AllReduce(absl::MakeSpan(u), op)}) {
        if (!s.ok()) return s;
      }
      // Bit-exact: the backend promises the rank-order reduction.
      if (f != ref_f || d != ref_d || iv != ref_i || u != ref_u) {
        return absl::InternalError("all-reduce differs from the serial reference");
      }
      return absl::OkStatus();
    }));
  }
}

TEST_P(GlooSizes, BroadcastFromEveryRoot) {
  const int n = GetParam();
  for (int root = 0; root < n; ++root) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{4097}}) {
      const uint64_t tag = 900 + root * 10 + len;
      auto payload = RankBytes(tag, root, len);
      const std::string want(payload.begin(), payload.end());
      ExpectAllOk(RunGroup("gloo", n, TestGroupOptions(), [&](WorkerGroup& g) {
        std::string bytes = g.rank() == root ? want : std::string("stale");
        absl::Status s = g.Broadcast(&bytes, root);
        if (!s.ok()) return s;
        return bytes == want ? absl::OkStatus()
                             : absl::InternalError("broadcast differs");
      }));
    }
  }
}

TEST_P(GlooSizes, BarrierWaitsForEveryRank) {
  const int n = GetParam();
  std::atomic<int> arrived{0};
  ExpectAllOk(RunGroup("gloo", n, TestGroupOptions(), [&](WorkerGroup& g) {
    // Later ranks arrive later.
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * g.rank()));
    arrived.fetch_add(1);
    absl::Status s = g.Barrier();
    if (!s.ok()) return s;
    return arrived.load() == n ? absl::OkStatus()
                               : absl::InternalError("left the barrier early");
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooSizes, ::testing::Values(1, 2, 3, 4));

TEST(GlooWorkerGroupTest, AgreeOnNamesTheDissentingRank) {
  auto ok = RunGroup("gloo", 3, TestGroupOptions(), [](WorkerGroup& g) {
    return g.AgreeOn("config", 0xC0FFEE);
  });
  ExpectAllOk(ok);
  auto bad = RunGroup("gloo", 3, TestGroupOptions(), [](WorkerGroup& g) {
    absl::Status s = g.AgreeOn("config", g.rank() == 2 ? 7 : 0xC0FFEE);
    if (s.ok()) return absl::InternalError("disagreement not detected");
    // The group stays usable after a disagreement.
    absl::Status b = g.Barrier();
    if (!b.ok()) return b;
    return s;
  });
  for (const absl::Status& s : bad) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s;
    EXPECT_NE(s.message().find("config"), std::string::npos) << s;
  }
}

TEST(GlooWorkerGroupTest, BadArgumentsAreRejectedAndGroupStaysUsable) {
  ExpectAllOk(RunGroup("gloo", 2, TestGroupOptions(), [](WorkerGroup& g) {
    std::vector<uint8_t> local(3), out(7);
    if (g.AllGather(local, absl::MakeSpan(out)).code() !=
        absl::StatusCode::kInvalidArgument) {
      return absl::InternalError("all-gather size mismatch accepted");
    }
    std::vector<float> in(9), part(4);
    if (g.ReduceScatter(in, absl::MakeSpan(part), 1.0f).code() !=
        absl::StatusCode::kInvalidArgument) {
      return absl::InternalError("reduce-scatter size mismatch accepted");
    }
    std::string bytes;
    if (g.Broadcast(&bytes, 5).code() != absl::StatusCode::kInvalidArgument) {
      return absl::InternalError("bad root accepted");
    }
    return g.Barrier();
  }));
  InMemoryRendezvousStore store;
  EXPECT_EQ(CreateWorkerGroup("gloo", 2, 2, &store, TestGroupOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateWorkerGroup("mpi", 0, 1, &store, TestGroupOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooWorkerGroupTest, RankThatNeverJoinsGivesDeadlineNamingIt) {
  const absl::Time start = absl::Now();
  auto statuses = RunPartialGroup("gloo", 3, {0, 1},
                                  TestGroupOptions(absl::Seconds(2)),
                                  [](WorkerGroup& g) { return g.Barrier(); });
  for (int r : {0, 1}) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded)
        << statuses[r];
    EXPECT_NE(statuses[r].message().find("rank 2"), std::string::npos)
        << statuses[r];
  }
  // Bounded (generous margin; not a timing assertion on the mechanism).
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(GlooWorkerGroupTest, PeerThatSkipsACollectiveGivesDeadlineThenBroken) {
  InMemoryRendezvousStore store;
  GroupOptions options = TestGroupOptions(absl::Seconds(2));
  absl::Status first, second;
  std::atomic<bool> done{false};
  std::thread rank1([&] {
    auto g = CreateWorkerGroup("gloo", 1, 2, &store, options);
    ASSERT_TRUE(g.ok()) << g.status();
    // Stays connected but never calls the collective.
    for (int i = 0; i < 1000 && !done.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  auto g = CreateWorkerGroup("gloo", 0, 2, &store, options);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<uint8_t> unit(64);
  first = (*g)->AllGatherInPlace(absl::MakeSpan(unit));
  second = (*g)->Barrier();
  done = true;
  rank1.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded) << first;
  EXPECT_NE(first.message().find("rank 1"), std::string::npos) << first;
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
}

TEST(GlooWorkerGroupTest, AGroupLeavesSigpipeIgnoredInItsHost) {
  // Nothing else in this test program touches SIGPIPE: without the group's
  // own setting it would stay at the default, which kills the process when a
  // peer goes away mid-write (the next test, under load).
  InMemoryRendezvousStore store;
  GroupOptions options = TestGroupOptions();
  absl::Status peer_status;
  std::thread peer([&] {
    auto p = CreateWorkerGroup("gloo", 1, 2, &store, options);
    peer_status = p.ok() ? (*p)->Barrier() : p.status();
  });
  auto g = CreateWorkerGroup("gloo", 0, 2, &store, options);
  absl::Status status = g.ok() ? (*g)->Barrier() : g.status();
  peer.join();
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(peer_status.ok()) << peer_status;
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
}

TEST(GlooWorkerGroupTest, PeerThatGoesAwayMidCollectiveGivesError) {
  InMemoryRendezvousStore store;
  GroupOptions options = TestGroupOptions(absl::Seconds(20));
  const int n = 3;
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto g = CreateWorkerGroup("gloo", rank, n, &store, options);
      if (!g.ok()) {
        statuses[rank] = g.status();
        return;
      }
      statuses[rank] = (*g)->Barrier();
      if (!statuses[rank].ok()) return;
      if (rank == 2) {
        g->reset();  // Closes its connections, as a dying process would.
        return;
      }
      std::vector<float> in(3 * 100000, 1.0f), out(100000);
      statuses[rank] = (*g)->ReduceScatter(in, absl::MakeSpan(out), 1.0f);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(statuses[2].ok()) << statuses[2];
  for (int r : {0, 1}) {
    EXPECT_FALSE(statuses[r].ok()) << "rank " << r;
    EXPECT_TRUE(statuses[r].code() == absl::StatusCode::kUnavailable ||
                statuses[r].code() == absl::StatusCode::kDeadlineExceeded)
        << statuses[r];
    // Rank 0 waits on rank 2 (its left neighbour) first; rank 1 may first
    // see rank 0, which closes its connections once it has failed.
    EXPECT_NE(statuses[r].message().find(r == 0 ? "rank 2" : "rank "),
              std::string::npos)
        << statuses[r];
  }
}

TEST(GlooWorkerGroupTest, GroupsWithDifferentNamesShareAStore) {
  InMemoryRendezvousStore store;
  for (int round = 0; round < 3; ++round) {
    GroupOptions options = TestGroupOptions();
    std::vector<absl::Status> statuses(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        auto g = CreateWorkerGroup("gloo", rank, 2, &store, options);
        statuses[rank] = g.ok() ? (*g)->Barrier() : g.status();
      });
    }
    for (auto& t : threads) t.join();
    ExpectAllOk(statuses);
  }
}

}  // namespace
}  // namespace zeroshard
