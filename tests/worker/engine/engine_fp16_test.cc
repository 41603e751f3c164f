// FP16 dynamic loss scaling with a real overflow: nothing is injected; the
// model's weights are initialised large enough (init_std kInitStd) and the
// scale high enough that the loss-scaled backward leaves FP32 range, and the
// engine must skip steps and back off until the scaled gradient fits. With
// the shipped example's hysteresis (2, examples/gpt-small-fp16.json) the
// sequence is DeepSpeed's DynamicLossScaler (common/loss_scaler.h): the
// first overflow only spends hysteresis, every later one halves the scale
// (hysteresis_left is not restored by a backoff), a clean step applies and
// keeps the scale (loss_scale_window 1000 is far away). With hysteresis 1
// this is torch.cuda.amp.GradScaler's update.
//
// And a run stopped between steps and resumed on the same servers keeps its
// loss scale (worker/engine/resume.h: rank 0's key-value record, found by
// FindLossScalerState and passed to StepEngine::RestoreLossScaler).
#include <cmath>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/engine/engine_checks.h"
#include "tests/worker/engine/engine_cluster.h"

namespace zeroshard::testing {
namespace {

// The engine's FP16 mode keeps the parameters in FP16 and computes in FP32
// (docs/DESIGN.md, "Mixed precision"), so the loss-scaled backward leaves
// range only when scale * |gradient| passes FLT_MAX (3.4e38). The config
// file allows at most 2^64; the test sets the parsed config's power to 127
// (LossScaler accepts [0, 127]) and initialises the weights with std
// kInitStd (FP16 holds them easily), so that the first steps' gradients,
// scaled by 2^127, overflow, and a few halvings make them fit.
// Measured here: with std 0.02 nothing overflows even at 2^127; with std 1
// steps 0-4 overflow (2^127 twice, then 2^126 .. 2^124) and 2^123 fits.
constexpr double kInitStd = 1.0;
constexpr int kScalePower = 127;

absl::StatusOr<TrainingConfig> OverflowConfig() {
  TinyKnobs k;
  k.precision = "fp16";
  k.hysteresis = 2;
  k.initial_scale_power = 64;
  k.init_std = kInitStd;
  k.steps = 10;
  absl::StatusOr<TrainingConfig> cfg = TinyConfig(k, 2, 2);
  if (cfg.ok()) cfg->fp16.initial_scale_power = kScalePower;
  return cfg;
}

// The loss scale each step used, by common/loss_scaler.h's rules written out
// (dynamic mode, hysteresis h, window far away), from the skip flags.
std::vector<double> ExpectedScales(const std::vector<bool>& skipped,
                                   double initial, int h) {
  std::vector<double> out;
  double scale = initial;
  int left = h;
  for (bool overflow : skipped) {
    out.push_back(scale);
    if (!overflow) continue;
    if (h == 1 || left == 1) {
      scale = std::max(scale / 2, 1.0);
    } else {
      --left;
    }
  }
  return out;
}

TEST(EngineFp16, RealOverflowSkipsWithHysteresisThenBacksOffUntilClean) {
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, OverflowConfig());
  ASSERT_OK_AND_ASSIGN(ClusterResult r, RunCluster(cfg));
  const std::vector<StepResult>& steps = r.ranks[0].steps;
  ASSERT_EQ(steps.size(), cfg.cluster.steps);
  std::vector<bool> skipped;
  uint64_t applied = 0;
  size_t first_clean = steps.size();
  for (size_t s = 0; s < steps.size(); ++s) {
    std::printf("step %zu: scale 2^%g skipped %d norm %g loss %g\n", s,
                std::log2(steps[s].loss_scale), steps[s].skipped,
                steps[s].grad_norm, steps[s].loss);
    skipped.push_back(steps[s].skipped);
    if (!steps[s].skipped) {
      ++applied;
      if (first_clean == steps.size()) first_clean = s;
    }
  }
  // At least two real overflows (so hysteresis and a backoff both happen),
  // then a scale that fits and training goes on.
  ASSERT_GE(first_clean, 2u) << "the initial scale did not overflow twice";
  ASSERT_LT(first_clean + 2, steps.size()) << "the overflow never ended";
  for (size_t s = 0; s < steps.size(); ++s) {
    // A skipped step's gradient was really non-finite; an applied one's not.
    EXPECT_EQ(std::isfinite(steps[s].grad_norm), !steps[s].skipped)
        << "step " << s << " norm " << steps[s].grad_norm;
  }
  const std::vector<double> want =
      ExpectedScales(skipped, std::ldexp(1.0, kScalePower), 2);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const RankRun& rank : r.ranks) {
      EXPECT_EQ(rank.steps[s].loss_scale, want[s]) << "step " << s;
      EXPECT_EQ(rank.steps[s].skipped, steps[s].skipped) << "step " << s;
    }
  }
  // Spelled out: the first overflow only spent hysteresis, the second
  // halved the scale, each further one halved it again.
  EXPECT_EQ(steps[1].loss_scale, steps[0].loss_scale);
  EXPECT_EQ(steps[first_clean].loss_scale,
            std::ldexp(steps[0].loss_scale, -static_cast<int>(first_clean - 1)));
  // An overflow after clean steps backs off at once: a backoff does not
  // restore hysteresis, only loss_scale_window clean steps would (measured
  // here: step 8 overflows again at 2^123).
  for (size_t s = first_clean + 1; s + 1 < steps.size(); ++s) {
    if (!steps[s].skipped) continue;
    std::printf("a later overflow at step %zu backs off at once\n", s);
    EXPECT_EQ(steps[s + 1].loss_scale, steps[s].loss_scale / 2) << s;
  }
  // The servers applied only the clean steps; versions count every step.
  for (const v1::InspectResponse& i : r.inspect) {
    EXPECT_EQ(i.min_version(), cfg.cluster.steps);
    EXPECT_EQ(i.adam_step(), applied);
  }
  ExpectTrainedWeights(r.weights, cfg, "fp16 after overflow");
  // The skipped steps changed no weight: stopped before the first clean
  // step, the servers still hold the initial weights, bit for bit.
  ASSERT_OK_AND_ASSIGN(auto cluster, EngineCluster::Start(2));
  TrainOptions o;
  o.stop_before_step = static_cast<int64_t>(first_clean);
  for (const RankRun& rank : TrainWorkers(*cluster, cfg, o)) {
    ASSERT_TRUE(rank.status.ok()) << rank.status;
    ASSERT_EQ(rank.steps.size(), first_clean);
    for (const StepResult& sr : rank.steps) EXPECT_TRUE(sr.skipped);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<float> w,
                       GatherWeights(*cluster, cfg, first_clean));
  ExpectBitIdentical(w, InitialWeights(cfg), "after the skipped steps");
}

// Stopped after step kStop - 1 (mid-backoff or just after it) and resumed:
// the same scales, skips and weights as the uninterrupted run, bit for bit.
TEST(EngineFp16, ResumedRunKeepsItsLossScale) {
  ASSERT_OK_AND_ASSIGN(TrainingConfig cfg, OverflowConfig());
  ASSERT_OK_AND_ASSIGN(ClusterResult whole, RunCluster(cfg));
  const std::vector<StepResult>& ref = whole.ranks[0].steps;
  ASSERT_EQ(ref.size(), cfg.cluster.steps);
  // Stop where the scale already differs from the initial one, so a fresh
  // scaler would be seen.
  size_t stop = 0;
  while (stop < ref.size() && ref[stop].loss_scale == ref[0].loss_scale) {
    ++stop;
  }
  ASSERT_LT(stop + 1, ref.size()) << "the scale never changed";
  ++stop;  // one step into the backed-off scale
  ASSERT_OK_AND_ASSIGN(auto cluster, EngineCluster::Start(2));
  TrainOptions first;
  first.stop_before_step = static_cast<int64_t>(stop);
  std::vector<RankRun> a = TrainWorkers(*cluster, cfg, first);
  std::vector<RankRun> b = TrainWorkers(*cluster, cfg);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(a[rank].status.ok()) << a[rank].status;
    ASSERT_TRUE(b[rank].status.ok()) << b[rank].status;
    ASSERT_EQ(a[rank].steps.size(), stop);
    ASSERT_EQ(a[rank].steps.size() + b[rank].steps.size(), ref.size());
    ASSERT_EQ(b[rank].steps[0].step, stop);
    for (size_t s = stop; s < ref.size(); ++s) {
      const StepResult& got = b[rank].steps[s - stop];
      EXPECT_EQ(got.loss_scale, ref[s].loss_scale) << "rank " << rank
                                                   << " step " << s;
      EXPECT_EQ(got.skipped, ref[s].skipped) << "step " << s;
      EXPECT_EQ(got.loss, ref[s].loss) << "step " << s;
    }
  }
  EXPECT_NE(b[0].steps[0].loss_scale, ref[0].loss_scale)
      << "the resumed run started from a fresh scaler";
  ASSERT_OK_AND_ASSIGN(std::vector<float> w,
                       GatherWeights(*cluster, cfg, cfg.cluster.steps));
  ExpectTrainedWeights(w, cfg, "resumed fp16");
  ExpectBitIdentical(w, whole.weights, "resumed vs uninterrupted");
}

}  // namespace
}  // namespace zeroshard::testing
