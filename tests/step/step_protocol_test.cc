// The step's protocol (step/step_protocol.h) on its own: its refusals, the
// ranks' one decision from their totalled sums, the reduce-scatter unit by
// unit against a serial sum, and the two-phase commit against in-process
// shard servers (nothing applied before rank 0's apply; a failing
// before_apply applies nothing).
#include "step/step_protocol.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grad_clip.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "model/gpt_manifest.h"
#include "tests/client/fake_shard_service.h"
#include "tests/comm/comm_group_runner.h"
#include "tests/worker/engine/engine_cluster.h"
#include "worker/engine/server_init.h"

namespace zeroshard::testing {
namespace step_protocol_test {

struct Served {
  std::unique_ptr<EngineCluster> servers;
  TrainingConfig config;
  std::unique_ptr<FlatLayout> layout;
};

// One in-process shard server and a tiny GPT's layout over `workers`.
absl::StatusOr<Served> Serve(int workers) {
  Served s;
  ASSIGN_OR_RETURN(s.servers, EngineCluster::Start(1));
  TinyKnobs knobs;
  knobs.layers = 1;
  knobs.width = 64;
  knobs.heads = 2;
  knobs.train_batch_size = 2 * workers;
  ASSIGN_OR_RETURN(s.config, TinyConfig(knobs, 1, workers));
  ASSIGN_OR_RETURN(ModelManifest manifest,
                   MakeGptManifest(s.config.cluster.model, workers));
  ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, 1, workers));
  s.layout = std::make_unique<FlatLayout>(std::move(layout));
  return s;
}

absl::StatusOr<std::unique_ptr<ShardCluster>> Connect(const Served& s) {
  ShardClientOptions o;
  o.call_timeout = absl::Seconds(20);
  o.run_id = "step-protocol-test";
  return ShardCluster::Connect(s.servers->addresses(), o, *s.layout);
}

StepProtocolOptions Options(int rank, int world, bool two_phase = true) {
  StepProtocolOptions o;
  o.rank = rank;
  o.world = world;
  o.step_timeout = absl::Seconds(20);
  o.two_phase = two_phase;
  return o;
}

TEST(StepProtocolTest, CreateRefusesWhatCannotRun) {
  absl::StatusOr<Served> s = Serve(1);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<std::unique_ptr<ShardCluster>> c = Connect(*s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(StepProtocol::Create(nullptr, nullptr, Options(0, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StepProtocol::Create(c->get(), nullptr, Options(1, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status two = StepProtocol::Create(c->get(), nullptr, Options(0, 2)).status();
  EXPECT_NE(two.message().find("need a group"), std::string::npos) << two;
  StepProtocolOptions no_time = Options(0, 1);
  no_time.step_timeout = absl::ZeroDuration();
  EXPECT_FALSE(StepProtocol::Create(c->get(), nullptr, no_time).ok());
  // A group whose shape is not the options'.
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        absl::Status bad =
            StepProtocol::Create(c->get(), &g, Options(1 - g.rank(), 2)).status();
        if (bad.ok()) return absl::InternalError("a swapped rank was accepted");
        return absl::OkStatus();
      });
  for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
  // One rank: no group to reduce over.
  absl::StatusOr<StepProtocol> one =
      StepProtocol::Create(c->get(), nullptr, Options(0, 1, false));
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<float> g(s->layout->total_elems()), part(g.size());
  EXPECT_EQ(one->ReduceScatterUnits(*s->layout, g.data(), g.size(), part.data(),
                                    part.size(), 1.0f)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepProtocolTest, RanksReachOneDecisionFromTheirTotals) {
  absl::StatusOr<Served> s = Serve(2);
  ASSERT_TRUE(s.ok()) << s.status();
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> pick(0.5, 40.0);
  const double sq[2] = {pick(rng), pick(rng)};
  const double loss[2] = {pick(rng), pick(rng)};
  const double clip = 1.0, denominator = 2.0;
  // The serial reference: the totals, then grad_clip's coefficient.
  const GradCoefficient want =
      ComputeGradCoefficient(sq[0] + sq[1], 1.0 * denominator, clip);
  std::vector<StepDecision> got(2);
  std::vector<double> loss_total(2);
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, Connect(*s));
        ASSIGN_OR_RETURN(StepProtocol p,
                         StepProtocol::Create(c.get(), &g, Options(g.rank(), 2)));
        ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::Create({}));
        double sums[2] = {sq[g.rank()], loss[g.rank()]};
        ASSIGN_OR_RETURN(got[g.rank()],
                         p.Decide(absl::MakeSpan(sums, 2), denominator, clip,
                                  &scaler));
        loss_total[g.rank()] = sums[1];
        return absl::OkStatus();
      });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(got[r].skip);
    EXPECT_EQ(got[r].norm, want.norm);
    EXPECT_EQ(got[r].coefficient, want.coefficient);
    EXPECT_EQ(got[r].clip_factor, want.clip_factor);
    EXPECT_EQ(loss_total[r], loss[0] + loss[1]);
  }
}

TEST(StepProtocolTest, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  absl::StatusOr<Served> s = Serve(2);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<StepDecision> got(2);
  std::vector<double> scale_after(2);
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, Connect(*s));
        ASSIGN_OR_RETURN(StepProtocol p,
                         StepProtocol::Create(c.get(), &g, Options(g.rank(), 2)));
        LossScalerOptions fp16;
        fp16.mode = LossScaleMode::kDynamic;
        fp16.initial_scale_power = 8;
        fp16.hysteresis = 1;
        ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::Create(fp16));
        double sums[1] = {g.rank() == 1
                              ? std::numeric_limits<double>::infinity()
                              : 3.0};
        ASSIGN_OR_RETURN(got[g.rank()],
                         p.Decide(absl::MakeSpan(sums, 1), 1.0, 0.0, &scaler));
        scale_after[g.rank()] = scaler.scale();
        const StepCommit commit = p.CommitFor(got[g.rank()]);
        if (!commit.skip || commit.coefficient != 0.0 || !commit.prepare) {
          return absl::InternalError("the commit does not carry the skip");
        }
        return absl::OkStatus();
      });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(got[r].overflow);
    EXPECT_TRUE(got[r].skip);
    EXPECT_EQ(got[r].coefficient, 0.0);
    EXPECT_EQ(scale_after[r], 128.0);  // 2^8 backed off once
  }
}

TEST(StepProtocolTest, ReduceScatterUnitsEqualsTheSerialSum) {
  absl::StatusOr<Served> s = Serve(2);
  ASSERT_TRUE(s.ok()) << s.status();
  const FlatLayout& layout = *s->layout;
  const uint64_t total = layout.total_elems();
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> pick(-4.0f, 4.0f);
  std::vector<std::vector<float>> grads(2, std::vector<float>(total));
  for (auto& g : grads) {
    for (float& x : g) x = pick(rng);
  }
  std::vector<std::vector<float>> parts(2);
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, Connect(*s));
        ASSIGN_OR_RETURN(StepProtocol p,
                         StepProtocol::Create(c.get(), &g, Options(g.rank(), 2)));
        uint64_t mine = 0;
        for (const FlatRange& r : layout.WorkerRanges(g.rank())) mine += r.size();
        std::vector<float>& part = parts[g.rank()];
        part.assign(mine, 0.0f);
        // A part of the wrong length is refused before any collective.
        if (p.ReduceScatterUnits(layout, grads[g.rank()].data(), total,
                                 part.data(), mine - 1, 0.5f)
                .ok()) {
          return absl::InternalError("a short part was accepted");
        }
        return p.ReduceScatterUnits(layout, grads[g.rank()].data(), total,
                                    part.data(), mine, 0.5f);
      });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  for (uint32_t r = 0; r < 2; ++r) {
    uint64_t at = 0;
    for (const FlatRange& range : layout.WorkerRanges(r)) {
      for (uint64_t i = range.begin; i < range.end; ++i, ++at) {
        // Two terms and a power-of-two scale: exact in any order.
        ASSERT_EQ(parts[r][at], (grads[0][i] + grads[1][i]) * 0.5f)
            << "rank " << r << " flat element " << i;
      }
    }
  }
}

TEST(StepProtocolTest, AllGatherUnitsFillsEveryRanksParts) {
  absl::StatusOr<Served> s = Serve(2);
  ASSERT_TRUE(s.ok()) << s.status();
  const FlatLayout& layout = *s->layout;
  const uint64_t total = layout.total_elems();
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint16_t> pick;
  std::vector<uint16_t> want(total);  // BF16-sized values
  for (uint16_t& x : want) x = pick(rng);
  std::vector<std::vector<uint16_t>> got(2);
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, Connect(*s));
        ASSIGN_OR_RETURN(StepProtocol p,
                         StepProtocol::Create(c.get(), &g, Options(g.rank(), 2)));
        // Only this rank's parts hold the values; the rest is garbage.
        std::vector<uint16_t>& flat = got[g.rank()];
        flat.assign(total, static_cast<uint16_t>(0xdead + g.rank()));
        for (const FlatRange& r : layout.WorkerRanges(g.rank())) {
          for (uint64_t i = r.begin; i < r.end; ++i) flat[i] = want[i];
        }
        if (p.AllGatherUnits(layout, flat.data(), total, 3).ok()) {
          return absl::InternalError("a 3-byte value was accepted");
        }
        return p.AllGatherUnits(layout, flat.data(), total, sizeof(uint16_t));
      });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
}

TEST(StepProtocolTest, TwoPhasesApplyOnlyWhenRankZeroCommits) {
  absl::StatusOr<Served> s = Serve(2);
  ASSERT_TRUE(s.ok()) << s.status();
  const FlatLayout& layout = *s->layout;
  std::vector<int64_t> before(2, -1), after_apply(2, -1), after_refused(2, -1);
  std::vector<std::string> refused(2);
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        const int rank = g.rank();
        ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, Connect(*s));
        RETURN_IF_ERROR(InitializeServers(s->config, rank, c.get(), &g));
        ASSIGN_OR_RETURN(StepProtocol p,
                         StepProtocol::Create(c.get(), &g, Options(rank, 2)));
        const std::vector<FlatRange> mine = layout.WorkerRanges(rank);
        std::vector<std::vector<float>> grad;
        std::vector<GradSpan> spans;
        for (const FlatRange& r : mine) grad.emplace_back(r.size(), 0.25f);
        for (size_t k = 0; k < mine.size(); ++k) {
          spans.push_back(GradSpan{mine[k], DType::kFp32, grad[k].data()});
        }
        std::vector<float> out(layout.total_elems());
        const FlatRange all{0, layout.total_elems()};
        auto version = [&]() -> absl::StatusOr<int64_t> {
          ASSIGN_OR_RETURN(GatherResult r,
                           c->Gather(absl::MakeConstSpan(&all, 1), DType::kFp32,
                                     -1, out.data(), out.size() * sizeof(float)));
          return r.max_version;
        };
        StepDecision d;
        d.coefficient = 1.0;
        for (uint64_t step = 0; step < 2; ++step) {
          RETURN_IF_ERROR(c->PushGrad(step, rank, spans, p.CommitFor(d), false)
                              .status());
          RETURN_IF_ERROR(g.Barrier());
          // Every rank's push is held, none applied.
          if (step == 0) {
            ASSIGN_OR_RETURN(before[rank], version());
          }
          RETURN_IF_ERROR(g.Barrier());
          if (step == 0) {
            RETURN_IF_ERROR(p.Commit(step, 0));
            RETURN_IF_ERROR(g.Barrier());
            ASSIGN_OR_RETURN(after_apply[rank], version());
          } else {
            absl::Status s = p.Commit(step, 0, [] {
              return absl::UnavailableError("before_apply failed");
            });
            refused[rank] = s.ok() ? "" : std::string(s.message());
            RETURN_IF_ERROR(g.Barrier());
            ASSIGN_OR_RETURN(after_refused[rank], version());
          }
        }
        return absl::OkStatus();
      });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(before[r], 0) << "rank " << r;
    EXPECT_EQ(after_apply[r], 1) << "rank " << r;
    EXPECT_EQ(after_refused[r], 1) << "rank " << r;  // step 1 held, not applied
  }
  EXPECT_EQ(refused[0], "before_apply failed");
  EXPECT_EQ(refused[1], "");  // only rank 0 applies
}

// Three in-process servers keeping two copies of each slot, and a tiny
// GPT's layout over two ranks.
struct Replicated {
  static constexpr int kServers = 3;
  std::unique_ptr<EngineCluster> servers;
  TrainingConfig config;
  std::unique_ptr<FlatLayout> layout;

  static absl::StatusOr<Replicated> Start() {
    Replicated r;
    ASSIGN_OR_RETURN(r.servers, EngineCluster::Start(kServers));
    TinyKnobs knobs;
    knobs.layers = 1;
    knobs.width = 64;
    knobs.heads = 2;
    knobs.train_batch_size = 4;
    ASSIGN_OR_RETURN(r.config, TinyConfig(knobs, kServers, 2));
    r.config.cluster.replicas = 2;
    ASSIGN_OR_RETURN(ModelManifest manifest,
                     MakeGptManifest(r.config.cluster.model, 2));
    ASSIGN_OR_RETURN(FlatLayout layout,
                     FlatLayout::Create(manifest, kServers, 2));
    r.layout = std::make_unique<FlatLayout>(std::move(layout));
    return r;
  }
  static ShardClientOptions Options() {
    ShardClientOptions o;
    o.call_timeout = absl::Seconds(20);
    o.run_id = "step-protocol-replicas";
    o.replicas = 2;
    return o;
  }
  absl::StatusOr<std::unique_ptr<ShardCluster>> Connect(
      std::vector<std::string> addresses = {}) const {
    if (addresses.empty()) addresses = servers->addresses();
    return ShardCluster::Connect(addresses, Options(), *layout);
  }
  // What a fresh client, which left nothing, finds of slot `slot`'s copy on
  // server k: its version.
  absl::StatusOr<uint64_t> CopyVersion(int slot, int k) const {
    ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> fresh, Connect());
    ASSIGN_OR_RETURN(ServerStatus st, fresh->InspectCopy(slot, k));
    return st.min_version;
  }
};

// A rank's gradient for its ranges, every element `value`.
struct RankGrads {
  std::vector<std::vector<float>> data;
  std::vector<GradSpan> spans;
  RankGrads(const FlatLayout& layout, int rank, float value) {
    const std::vector<FlatRange> mine = layout.WorkerRanges(rank);
    for (const FlatRange& r : mine) data.emplace_back(r.size(), value);
    for (size_t k = 0; k < mine.size(); ++k) {
      spans.push_back(GradSpan{mine[k], DType::kFp32, data[k].data()});
    }
  }
};

// Every element of the current version, gathered.
absl::StatusOr<std::pair<int64_t, std::vector<float>>> GatherAll(
    ShardCluster& c) {
  const FlatLayout& layout = c.layout();
  std::vector<float> out(layout.total_elems());
  const FlatRange all{0, layout.total_elems()};
  ASSIGN_OR_RETURN(GatherResult r,
                   c.Gather(absl::MakeConstSpan(&all, 1), DType::kFp32, -1,
                            out.data(), out.size() * sizeof(float)));
  return std::make_pair(r.max_version, std::move(out));
}

// With replicas the commit's barrier carries which servers each rank has
// left: a server that one rank found gone is left by every rank before the
// step is applied and gathered, so the apply skips both of its copies and
// no rank reads a copy that misses the step (nor waits out a server its
// peer already found silent).
TEST(StepProtocolTest, WithReplicasEveryRankLeavesTheServersAnyRankLeft) {
  absl::StatusOr<Replicated> s = Replicated::Start();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::vector<bool>> gone(2);
  std::vector<int64_t> version(2, -1);
  std::vector<absl::Status> st = RunGroup(
      "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
        const int rank = g.rank();
        ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, s->Connect());
        RETURN_IF_ERROR(InitializeServers(s->config, rank, c.get(), &g));
        ASSIGN_OR_RETURN(StepProtocol p,
                         StepProtocol::Create(c.get(), &g, Options(rank, 2)));
        const RankGrads grads(*s->layout, rank, 0.25f);
        StepDecision d;
        d.coefficient = 1.0;
        // Both ranks push to every copy; then rank 0 alone finds server 2
        // gone (as its own failover would), before the commit.
        RETURN_IF_ERROR(
            c->PushGrad(0, rank, grads.spans, p.CommitFor(d), false).status());
        if (rank == 0) c->LeaveServer(2, absl::UnavailableError("test"));
        RETURN_IF_ERROR(p.Commit(0, 0));
        RETURN_IF_ERROR(g.Barrier());
        for (int k = 0; k < Replicated::kServers; ++k) {
          gone[rank].push_back(c->ServerGone(k));
        }
        ASSIGN_OR_RETURN(auto gathered, GatherAll(*c));
        version[rank] = gathered.first;
        return absl::OkStatus();
      });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(gone[rank], (std::vector<bool>{false, false, true}));
    EXPECT_EQ(version[rank], 1);
  }
  // Slot 2's copies: on server 2 (left: the step not applied), on server 0.
  EXPECT_EQ(*s->CopyVersion(2, 2), 0u);
  EXPECT_EQ(*s->CopyVersion(2, 0), 1u);
}

// A one-sided partition: rank 1 cannot reach server 2 at all (its address
// for it refuses), rank 0 can. Rank 1 leaves server 2 at its first push and
// writes the other copies only; at each commit rank 0 leaves it too, so the
// steps go on from the same copies on both ranks, with the values of the
// run that lost nothing.
TEST(StepProtocolTest, WithReplicasAOneSidedPartitionCostsNoStep) {
  absl::StatusOr<Replicated> s = Replicated::Start();
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<Replicated> whole = Replicated::Start();
  ASSERT_TRUE(whole.ok()) << whole.status();
  constexpr uint64_t kSteps = 3;
  std::vector<std::vector<float>> weights(2), reference(2);
  std::vector<int64_t> version(2, -1);
  std::vector<bool> rank0_left(1, false);
  auto run = [&](const Replicated& cluster, bool partition,
                 std::vector<std::vector<float>>& out) {
    return RunGroup(
        "gloo", 2, TestGroupOptions(), [&](WorkerGroup& g) -> absl::Status {
          const int rank = g.rank();
          ASSIGN_OR_RETURN(std::unique_ptr<ShardCluster> c, cluster.Connect());
          RETURN_IF_ERROR(InitializeServers(cluster.config, rank, c.get(), &g));
          if (partition && rank == 1) {
            std::vector<std::string> addresses = cluster.servers->addresses();
            addresses[2] = absl::StrCat("127.0.0.1:", UnusedPort());
            ASSIGN_OR_RETURN(c, cluster.Connect(addresses));
          }
          ASSIGN_OR_RETURN(StepProtocol p,
                           StepProtocol::Create(c.get(), &g, Options(rank, 2)));
          StepDecision d;
          d.coefficient = 1.0;
          for (uint64_t step = 0; step < kSteps; ++step) {
            const RankGrads grads(*cluster.layout, rank,
                                  0.125f * (rank + 1) * (step + 1));
            RETURN_IF_ERROR(
                c->PushGrad(step, rank, grads.spans, p.CommitFor(d), false)
                    .status());
            RETURN_IF_ERROR(p.Commit(step, 0));
            RETURN_IF_ERROR(g.Barrier());
          }
          ASSIGN_OR_RETURN(auto gathered, GatherAll(*c));
          if (partition) version[rank] = gathered.first;
          if (partition && rank == 0) rank0_left[0] = c->ServerGone(2);
          out[rank] = std::move(gathered.second);
          return absl::OkStatus();
        });
  };
  for (const absl::Status& x : run(*whole, false, reference)) {
    ASSERT_TRUE(x.ok()) << x;
  }
  for (const absl::Status& x : run(*s, true, weights)) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_TRUE(rank0_left[0]);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(version[rank], static_cast<int64_t>(kSteps));
    EXPECT_TRUE(weights[rank] == reference[0]);
  }
  // Server 2 was left at the first commit: its copies stand at 0.
  EXPECT_EQ(*s->CopyVersion(2, 2), 0u);
  EXPECT_EQ(*s->CopyVersion(1, 2), 0u);
}

}  // namespace step_protocol_test
}  // namespace zeroshard::testing
