// What one step decides: the FP16 overflow skip and loss-scale backoff (and
// what the servers record for it), global-norm clipping (torch's
// clip_grad_norm_ formula on the gathered gradient), and bad input that
// must end in a clear error on every rank, never a hang.
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/worker/engine/engine_cluster.h"
#include "tests/support/local_trainer.h"

namespace zeroshard::testing {
namespace {

// ||a - b|| / ||a||.
double RelativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff2 = 0, a2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    diff2 += e * e;
    a2 += static_cast<double>(a[i]) * a[i];
  }
  return std::sqrt(diff2 / a2);
}

// With its servers on the same host (zeroshard.shared_memory, on by
// default) each rank opens a region on each server and pushes and gathers
// its partitions through it; the weights are those of the same run over
// gRPC alone, bit for bit.
TEST(EngineStep, LocalServersAreReachedThroughSharedMemoryBitForBit) {
  TinyKnobs k;
  k.precision = "bf16";
  k.steps = 3;
  std::vector<float> weights[2];
  for (const bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "gRPC alone");
    ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(k, 2, 2));
    cfg.cluster.shared_memory = shm;
    TrainOptions o;
    std::atomic<int> attached_ranks{0};
    o.on_step = [&](int, const StepEngine& e, const StepResult& r) {
      if (r.step == 0 && e.shared_memory_servers() == 2) ++attached_ranks;
    };
    ASSERT_OK_AND_ASSIGN(ClusterResult r, RunCluster(cfg, o));
    EXPECT_EQ(attached_ranks.load(), shm ? 2 : 0);
    for (const v1::InspectResponse& s : r.inspect) {
      const auto& calls = s.counters().calls();
      const auto it = calls.find("OpenRegion");
      EXPECT_EQ(it == calls.end() ? 0u : it->second, shm ? 2u : 0u)
          << "server " << s.server_index();
      EXPECT_EQ(s.min_version(), 3u);
    }
    weights[shm ? 0 : 1] = r.weights;
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  EXPECT_EQ(std::memcmp(weights[0].data(), weights[1].data(),
                        weights[0].size() * sizeof(float)),
            0);
}

TEST(EngineStep, InjectedFp16OverflowSkipsAndBacksOff) {
  TinyKnobs k;
  k.precision = "fp16";
  k.hysteresis = 1;
  k.steps = 4;
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(k, 2, 2));
  TrainOptions o;
  o.inject_overflow_step = 2;
  o.inject_overflow_rank = 1;  // one worker's overflow must skip everyone
  ASSERT_OK_AND_ASSIGN(ClusterResult r, RunCluster(cfg, o));
  for (const RankRun& rank : r.ranks) {
    ASSERT_EQ(rank.steps.size(), 4u);
    EXPECT_FALSE(rank.steps[0].skipped);
    EXPECT_FALSE(rank.steps[1].skipped);
    EXPECT_TRUE(rank.steps[2].skipped);
    EXPECT_FALSE(rank.steps[3].skipped);
    EXPECT_EQ(rank.steps[0].loss_scale, 65536.0);
    EXPECT_EQ(rank.steps[2].loss_scale, rank.steps[1].loss_scale);
    EXPECT_EQ(rank.steps[3].loss_scale, rank.steps[2].loss_scale / 2);
  }
  // Versions count every step; the Adam step count only the applied ones.
  for (const v1::InspectResponse& s : r.inspect) {
    EXPECT_EQ(s.min_version(), 4u);
    EXPECT_EQ(s.max_version(), 4u);
    EXPECT_EQ(s.adam_step(), 3u);
  }
  // And the skipped step changed no weight: the LocalTrainer, skipping the
  // same step, lands on the same weights (to reduction-order tolerance).
  ASSERT_OK_AND_ASSIGN(BatchSampler sampler, TestSampler(cfg));
  ASSERT_OK_AND_ASSIGN(auto local, LocalTrainer::Create(cfg, &sampler));
  local->InjectOverflowAt(2);
  for (uint64_t s = 0; s < 4; ++s) {
    ASSERT_OK_AND_ASSIGN(StepResult lr, local->Step(s));
    EXPECT_EQ(lr.skipped, s == 2);
  }
  EXPECT_LE(RelativeL2(r.weights, local->master()), 1e-5);
}

TEST(EngineStep, ClippingFollowsTorchClipGradNorm) {
  TinyKnobs k;
  k.gradient_clipping = 0.05;  // well below the norm: clipping is active
  k.steps = 3;
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(k, 2, 2));
  // Each rank's FP32 grad shard after each step (the summed, scaled
  // gradient of its partition).
  absl::Mutex mu;
  std::map<std::pair<uint64_t, int>, std::vector<float>> shards;
  TrainOptions o;
  o.on_step = [&](int rank, const StepEngine& e, const StepResult& r) {
    absl::MutexLock lock(&mu);
    shards[{r.step, rank}].assign(e.grad_shard().begin(), e.grad_shard().end());
  };
  ASSERT_OK_AND_ASSIGN(ClusterResult r, RunCluster(cfg, o));
  const double denom = static_cast<double>(cfg.cluster.workers) *
                       cfg.gradient_accumulation_steps;
  for (uint64_t s = 0; s < cfg.cluster.steps; ++s) {
    // torch.nn.utils.clip_grad_norm_(params, max_norm): total_norm = the L2
    // norm of all gradients; clip_coef = max_norm / (total_norm + 1e-6),
    // applied when < 1. The gradient is the mean over the global batch:
    // the shards' sum divided by N * gas (loss scale 1 in fp32).
    double sumsq = 0;
    for (int rank = 0; rank < cfg.cluster.workers; ++rank) {
      for (float g : shards[{s, rank}]) {
        const double x = g / denom;
        sumsq += x * x;
      }
    }
    const double norm = std::sqrt(sumsq);
    const double clip = std::min(1.0, cfg.gradient_clipping / (norm + 1e-6));
    ASSERT_LT(clip, 1.0) << "clipping must be active at step " << s;
    for (const RankRun& rank : r.ranks) {
      EXPECT_NEAR(rank.steps[s].grad_norm, norm, 1e-9 * norm) << s;
      EXPECT_NEAR(rank.steps[s].clip_factor, clip, 1e-9 * clip) << s;
    }
  }
  // The clipped update is the LocalTrainer's, which clips its own
  // (independently summed) gradient.
  ASSERT_OK_AND_ASSIGN(BatchSampler sampler, TestSampler(cfg));
  ASSERT_OK_AND_ASSIGN(auto local, LocalTrainer::Create(cfg, &sampler));
  for (uint64_t s = 0; s < cfg.cluster.steps; ++s) {
    ASSERT_OK_AND_ASSIGN(StepResult lr, local->Step(s));
    EXPECT_NEAR(lr.grad_norm, r.ranks[0].steps[s].grad_norm,
                1e-4 * lr.grad_norm);
  }
  EXPECT_LE(RelativeL2(r.weights, local->master()), 1e-5);
}

TEST(EngineBadInput, WorkersWithDifferentConfigsFailOnEveryRank) {
  TinyKnobs k;
  ASSERT_OK_AND_ASSIGN(TrainingConfig a, TinyConfig(k, 1, 2));
  k.lr = 2e-3;
  ASSERT_OK_AND_ASSIGN(TrainingConfig b, TinyConfig(k, 1, 2));
  ASSERT_OK_AND_ASSIGN(auto cluster, EngineCluster::Start(1));
  TrainOptions o;
  o.per_rank = {a, b};
  o.group_timeout = absl::Seconds(10);
  const absl::Time t0 = absl::Now();
  std::vector<RankRun> runs = TrainWorkers(*cluster, a, o);
  const absl::Duration took = absl::Now() - t0;
  // Found by AgreeOn before anything waits: well inside the group timeout.
  EXPECT_LT(took, o.group_timeout) << absl::FormatDuration(took);
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].status.code(), absl::StatusCode::kFailedPrecondition)
        << "rank " << r << ": " << runs[r].status;
    EXPECT_NE(runs[r].status.message().find("config"), std::string::npos)
        << runs[r].status;
    EXPECT_TRUE(runs[r].steps.empty());
  }
  // Nobody initialised or trained.
  ASSERT_OK_AND_ASSIGN(auto inspect, InspectServers(*cluster, a));
  EXPECT_FALSE(inspect[0].initialized());
  std::printf("[ disagree ] failed after %.2f s\n",
              absl::ToDoubleSeconds(absl::Now() - t0));
}

TEST(EngineBadInput, ServerGoneMidTrainingFailsTheStep) {
  TinyKnobs k;
  k.steps = 50;
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, TinyConfig(k, 2, 1));
  ASSERT_OK_AND_ASSIGN(auto cluster, EngineCluster::Start(2));
  TrainOptions o;
  o.call_timeout = absl::Seconds(5);
  o.group_timeout = absl::Seconds(10);
  absl::Time stopped_at = absl::InfiniteFuture();
  o.on_step = [&](int, const StepEngine&, const StepResult& r) {
    if (r.step == 1) {
      stopped_at = absl::Now();
      cluster->StopServer(1);
    }
  };
  const absl::Time t0 = absl::Now();
  std::vector<RankRun> runs = TrainWorkers(*cluster, cfg, o);
  // Reported within a bound: a call in flight when the server stops is
  // cancelled by its shutdown (CANCELLED: StopServer shuts it down with no
  // grace), the calls after it find no server (UNAVAILABLE) and are
  // retried for at most min(call timeout, 5 s) (engine_cluster.cc's
  // ClientOptions); a fetch that waits instead ends at the 5 s call
  // deadline. 5 s of slack for a loaded machine.
  const absl::Duration reported = absl::Now() - stopped_at;
  EXPECT_LT(reported, o.call_timeout + absl::Seconds(5) + absl::Seconds(5))
      << absl::FormatDuration(reported);
  const absl::StatusCode code = runs[0].status.code();
  EXPECT_TRUE(code == absl::StatusCode::kCancelled ||
              code == absl::StatusCode::kUnavailable ||
              code == absl::StatusCode::kDeadlineExceeded)
      << runs[0].status;
  EXPECT_EQ(runs[0].steps.size(), 2u);
  std::printf("[ server gone ] step 2 failed after %.2f s: %s\n",
              absl::ToDoubleSeconds(absl::Now() - t0),
              runs[0].status.ToString().c_str());
}

}  // namespace
}  // namespace zeroshard::testing
