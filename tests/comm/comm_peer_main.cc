// comm_peer: one rank of a Gloo WorkerGroup as its own process, for
// comm_process_test. Rendezvous through a FileRendezvousStore directory.
//
//   comm_peer DIR RANK SIZE SEED MODE
//
// MODE "check": all-gather, reduce-scatter, all-reduce, broadcast and
//   agreement against serial references computed here from SEED for every
//   rank. Exit 0 when all match, 10 on a mismatch, 11 on a failed call.
// MODE "vanish": after a barrier the last rank kills itself (SIGKILL); the
//   others run a reduce-scatter that must fail with UNAVAILABLE or
//   DEADLINE_EXCEEDED naming the dead rank: exit 0 when it does, 12 on
//   another error, 13 when it succeeds.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/comm/comm_file_store.h"
#include "comm/collectives.h"

namespace zeroshard {
namespace {

std::vector<float> RankFloats(uint64_t seed, int rank, size_t n) {
  std::mt19937_64 rng(seed * 31 + rank);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "comm_peer: %s: %s\n", what, s.ToString().c_str());
  return 11;
}

int Check(WorkerGroup& g, uint64_t seed) {
  const int n = g.size();
  const size_t part = 50001;  // odd on purpose
  // All-gather of the floats' bytes.
  std::vector<float> unit(part * n, NAN);
  auto mine = RankFloats(seed, g.rank(), part);
  std::copy(mine.begin(), mine.end(), unit.begin() + g.rank() * part);
  absl::Status s = g.AllGatherInPlace(absl::MakeSpan(
      reinterpret_cast<uint8_t*>(unit.data()), unit.size() * sizeof(float)));
  if (!s.ok()) return Fail("all-gather", s);
  for (int r = 0; r < n; ++r) {
    auto want = RankFloats(seed, r, part);
    if (!std::equal(want.begin(), want.end(), unit.begin() + r * part)) {
      std::fprintf(stderr, "comm_peer: all-gather part %d differs\n", r);
      return 10;
    }
  }
  // Reduce-scatter of a unit-sized gradient.
  auto grad = RankFloats(seed + 1, g.rank(), part * n);
  std::vector<float> shard(part);
  s = g.ReduceScatter(grad, absl::MakeSpan(shard), 1.0f / n);
  if (!s.ok()) return Fail("reduce-scatter", s);
  std::vector<double> sum(part, 0.0);
  for (int r = 0; r < n; ++r) {
    auto v = RankFloats(seed + 1, r, part * n);
    for (size_t i = 0; i < part; ++i) sum[i] += v[g.rank() * part + i];
  }
  for (size_t i = 0; i < part; ++i) {
    if (std::fabs(shard[i] - sum[i] / n) > 1e-5) {
      std::fprintf(stderr, "comm_peer: reduce-scatter element %zu: %g vs %g\n",
                   i, shard[i], sum[i] / n);
      return 10;
    }
  }
  // Small all-reduce: sum of squares and an overflow flag.
  double norm_flag[2] = {0.0, g.rank() == 0 ? 1.0 : 0.0};
  for (float x : shard) norm_flag[0] += double{x} * x;
  std::vector<double> sums(n);
  sums[g.rank()] = norm_flag[0];
  s = g.AllReduce(absl::MakeSpan(sums), ReduceOp::kSum);
  if (!s.ok()) return Fail("all-reduce", s);
  s = g.AllReduce(absl::MakeSpan(norm_flag, 2), ReduceOp::kMax);
  if (!s.ok()) return Fail("all-reduce", s);
  double max_sum = 0;
  for (double x : sums) max_sum = std::max(max_sum, x);
  if (norm_flag[0] != max_sum || norm_flag[1] != 1.0) {
    std::fprintf(stderr, "comm_peer: all-reduce max differs\n");
    return 10;
  }
  // Broadcast from the last rank, then agreement on its hash.
  std::string config = g.rank() == n - 1 ? "{\"seed\": " + std::to_string(seed) + "}" : "";
  s = g.Broadcast(&config, n - 1);
  if (!s.ok()) return Fail("broadcast", s);
  if (config != "{\"seed\": " + std::to_string(seed) + "}") {
    std::fprintf(stderr, "comm_peer: broadcast differs\n");
    return 10;
  }
  s = g.AgreeOn("config", std::hash<std::string>{}(config));
  if (!s.ok()) return Fail("agree", s);
  return 0;
}

int Vanish(WorkerGroup& g) {
  absl::Status s = g.Barrier();
  if (!s.ok()) return Fail("barrier", s);
  if (g.rank() == g.size() - 1) raise(SIGKILL);
  const size_t part = 1 << 20;
  std::vector<float> in(part * g.size(), 1.0f), out(part);
  s = g.ReduceScatter(in, absl::MakeSpan(out), 1.0f);
  if (s.ok()) return 13;
  std::fprintf(stderr, "comm_peer: rank %d saw: %s\n", g.rank(),
               s.ToString().c_str());
  // Rank 0 waits on the dead rank (its left neighbour) first, so it names
  // it; the others may first see a surviving peer that already gave up.
  const std::string who =
      g.rank() == 0 ? absl::StrCat("rank ", g.size() - 1) : "rank ";
  const bool named = s.message().find(who) != absl::string_view::npos;
  return (s.code() == absl::StatusCode::kUnavailable ||
          s.code() == absl::StatusCode::kDeadlineExceeded) &&
                 named
             ? 0
             : 12;
}

int Main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: comm_peer DIR RANK SIZE SEED check|vanish\n");
    return 2;
  }
  FileRendezvousStore store(argv[1]);
  const int rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  const uint64_t seed = std::strtoull(argv[4], nullptr, 10);
  const std::string mode = argv[5];
  GroupOptions options;
  options.group = "peers";
  options.timeout = absl::Seconds(10);
  auto group = CreateWorkerGroup("gloo", rank, size, &store, options);
  if (!group.ok()) return Fail("create", group.status());
  if (mode == "check") return Check(**group, seed);
  if (mode == "vanish") return Vanish(**group);
  std::fprintf(stderr, "comm_peer: unknown mode %s\n", mode.c_str());
  return 2;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  // As zeroshard-worker: a write to a vanished peer is an error, not a kill.
  signal(SIGPIPE, SIG_IGN);
  return zeroshard::Main(argc, argv);
}
