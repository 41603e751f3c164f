// LossScaler: DeepSpeed's dynamic loss scaling (growth window, backoff,
// hysteresis in both modes, the min_loss_scale floor and the "cannot
// proceed" error), static and none modes, and agreement with
// torch.cuda.amp.GradScaler's update rule when hysteresis is 1.
//
// No torch fixture: torch 1.13's _amp_update_scale_ has no CPU kernel, so the
// GradScaler rule is written out below from its documented semantics
// (growth_tracker counts consecutive clean steps; growth at growth_interval).
#include "common/loss_scaler.h"

#include <cfloat>
#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

LossScalerOptions Dynamic(int power, int window, int hysteresis, double min_scale = 1,
                          bool consecutive = false, int max_at_min = 10) {
  LossScalerOptions o;
  o.mode = LossScaleMode::kDynamic;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  o.min_loss_scale = min_scale;
  o.consecutive_hysteresis = consecutive;
  o.max_overflows_at_min_scale = max_at_min;
  return o;
}

LossScaler Make(const LossScalerOptions& o) {
  absl::StatusOr<LossScaler> s = LossScaler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

bool Step(LossScaler& s, bool overflow) {
  absl::StatusOr<bool> r = s.Update(overflow);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() && *r;
}

TEST(LossScalerTest, InitialScaleAndGrowthWindow) {
  LossScaler s = Make(Dynamic(10, 3, 2));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(Step(s, false));
  EXPECT_TRUE(Step(s, false));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(Step(s, false));  // 3rd clean step: x2
  EXPECT_EQ(s.scale(), 2048);
  for (int i = 0; i < 2; ++i) Step(s, false);
  EXPECT_EQ(s.scale(), 2048);
  Step(s, false);
  EXPECT_EQ(s.scale(), 4096);
}

TEST(LossScalerTest, OverflowRestartsTheGrowthWindow) {
  LossScaler s = Make(Dynamic(4, 4, 1));
  for (int i = 0; i < 3; ++i) Step(s, false);
  EXPECT_FALSE(Step(s, true));  // backoff: 16 -> 8
  EXPECT_EQ(s.scale(), 8);
  for (int i = 0; i < 3; ++i) Step(s, false);
  EXPECT_EQ(s.scale(), 8);
  Step(s, false);  // 4 clean steps since the overflow
  EXPECT_EQ(s.scale(), 16);
  EXPECT_EQ(s.state().skipped_steps, 1u);
}

TEST(LossScalerTest, HysteresisDelaysBackoffAndIsRestoredOnlyAtGrowth) {
  LossScaler s = Make(Dynamic(8, 3, 2));
  EXPECT_FALSE(Step(s, true));  // absorbed by hysteresis: skipped, scale kept
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.state().hysteresis_left, 1);
  EXPECT_TRUE(Step(s, false));  // non-consecutive mode: not restored here
  EXPECT_EQ(s.state().hysteresis_left, 1);
  EXPECT_FALSE(Step(s, true));  // backoff
  EXPECT_EQ(s.scale(), 128);
  EXPECT_FALSE(Step(s, true));  // still exhausted: backoff again
  EXPECT_EQ(s.scale(), 64);
  for (int i = 0; i < 3; ++i) Step(s, false);  // growth restores hysteresis
  EXPECT_EQ(s.scale(), 128);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  EXPECT_FALSE(Step(s, true));
  EXPECT_EQ(s.scale(), 128);
}

TEST(LossScalerTest, ConsecutiveHysteresisRestoresOnEveryCleanStep) {
  LossScaler s = Make(Dynamic(8, 100, 2, 1, /*consecutive=*/true));
  for (int round = 0; round < 5; ++round) {
    EXPECT_FALSE(Step(s, true));
    EXPECT_TRUE(Step(s, false));
  }
  EXPECT_EQ(s.scale(), 256);  // isolated overflows never back off
  Step(s, true);
  Step(s, true);  // two in a row do
  EXPECT_EQ(s.scale(), 128);
}

TEST(LossScalerTest, FloorAndCannotProceedError) {
  LossScaler s = Make(Dynamic(2, 1000, 1, /*min_scale=*/1, false, /*max_at_min=*/3));
  Step(s, true);  // 4 -> 2
  Step(s, true);  // 2 -> 1 (reaches the floor; not yet "at" it)
  EXPECT_EQ(s.scale(), 1);
  EXPECT_FALSE(Step(s, true));  // at the floor: 1
  EXPECT_FALSE(Step(s, true));  // 2
  EXPECT_EQ(s.scale(), 1);
  EXPECT_TRUE(Step(s, false));  // a clean step resets the count
  EXPECT_EQ(s.state().overflows_at_min, 0);
  Step(s, true);
  Step(s, true);
  absl::StatusOr<bool> r = s.Update(true);  // 3rd consecutive at the floor
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("cannot proceed"), std::string::npos);
}

TEST(LossScalerTest, BackoffNeverGoesBelowMinimum) {
  LossScaler s = Make(Dynamic(5, 1000, 1, /*min_scale=*/3, false, 1000));
  for (int i = 0; i < 20; ++i) Step(s, true);
  EXPECT_EQ(s.scale(), 3);
}

TEST(LossScalerTest, GrowthStopsAtTheLargestFloatPowerOfTwo) {
  LossScaler s = Make(Dynamic(125, 1, 2));
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(Step(s, false));
  EXPECT_EQ(s.scale(), std::ldexp(1.0, 127));
}

TEST(LossScalerTest, StaticAndNoneModesNeverChange) {
  LossScalerOptions st;
  st.mode = LossScaleMode::kStatic;
  st.static_scale = 512;
  st.max_overflows_at_min_scale = 4;
  LossScaler s = Make(st);
  LossScaler none = Make(LossScalerOptions{});
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const bool overflow = rng() % 5 == 0;
    EXPECT_EQ(Step(s, overflow), !overflow);
    EXPECT_EQ(Step(none, overflow), !overflow);
    EXPECT_EQ(s.scale(), 512);
    EXPECT_EQ(none.scale(), 1);
  }
  for (int i = 0; i < 3; ++i) Step(s, false);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.Update(true).status().code(), absl::StatusCode::kFailedPrecondition);
}

// torch.cuda.amp.GradScaler's update, written out from its semantics.
struct GradScalerRule {
  double scale;
  int interval;
  int tracker = 0;
  void Update(bool found_inf) {
    if (found_inf) {
      scale *= 0.5;
      tracker = 0;
    } else if (++tracker == interval) {
      scale *= 2.0;
      tracker = 0;
    }
  }
};

TEST(LossScalerTest, MatchesGradScalerRuleWithHysteresisOne) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20; ++trial) {
    const int window = 1 + static_cast<int>(rng() % 9);
    const double p = 0.02 + 0.3 * (rng() % 100) / 100.0;
    const double floor = std::ldexp(1.0, -900);  // never reached below
    LossScaler s = Make(Dynamic(16, window, 1, floor, false, 1 << 30));
    GradScalerRule ref{65536.0, window};
    std::bernoulli_distribution overflow(p);
    for (int i = 0; i < 2000; ++i) {
      const bool o = overflow(rng);
      EXPECT_EQ(Step(s, o), !o);
      ref.Update(o);
      // GradScaler has neither our floor nor our cap at FLT_MAX.
      if (ref.scale < floor || ref.scale > FLT_MAX) break;
      ASSERT_EQ(s.scale(), ref.scale) << "trial " << trial << " step " << i;
    }
  }
}

TEST(LossScalerTest, RestoreResumesIdentically) {
  std::mt19937 rng(99);
  const LossScalerOptions o = Dynamic(12, 5, 3, 1, false, 1 << 30);
  LossScaler a = Make(o);
  for (int i = 0; i < 57; ++i) Step(a, rng() % 4 == 0);
  LossScaler b = Make(o);
  ASSERT_TRUE(b.Restore(a.state()).ok());
  for (int i = 0; i < 200; ++i) {
    const bool ov = rng() % 4 == 0;
    EXPECT_EQ(Step(a, ov), Step(b, ov));
    ASSERT_EQ(a.state(), b.state());
  }
  LossScalerState bad = a.state();
  bad.hysteresis_left = 4;
  EXPECT_FALSE(b.Restore(bad).ok());
  bad = a.state();
  bad.scale = NAN;
  EXPECT_FALSE(b.Restore(bad).ok());
}

TEST(LossScalerTest, CreateRejectsBadOptions) {
  EXPECT_FALSE(LossScaler::Create(Dynamic(16, 0, 2)).ok());
  EXPECT_FALSE(LossScaler::Create(Dynamic(16, 10, 0)).ok());
  EXPECT_FALSE(LossScaler::Create(Dynamic(-1, 10, 2)).ok());
  EXPECT_FALSE(LossScaler::Create(Dynamic(2, 10, 2, /*min_scale=*/8)).ok());
  EXPECT_FALSE(LossScaler::Create(Dynamic(2, 10, 2, 1, false, 0)).ok());
  LossScalerOptions st;
  st.mode = LossScaleMode::kStatic;
  st.static_scale = -1;
  EXPECT_FALSE(LossScaler::Create(st).ok());
}

TEST(LossScalerTest, OptionsFromConfig) {
  TrainingConfig c;
  c.precision = Precision::kBf16;
  EXPECT_EQ(LossScalerOptionsFor(c).mode, LossScaleMode::kNone);
  c.precision = Precision::kFp16;
  c.fp16.initial_scale_power = 9;
  c.fp16.hysteresis = 4;
  c.cluster.max_overflows_at_min_scale = 7;
  LossScalerOptions o = LossScalerOptionsFor(c);
  EXPECT_EQ(o.mode, LossScaleMode::kDynamic);
  EXPECT_EQ(o.hysteresis, 4);
  EXPECT_EQ(o.max_overflows_at_min_scale, 7);
  EXPECT_EQ(Make(o).scale(), 512);
  c.fp16.loss_scale = 64;
  o = LossScalerOptionsFor(c);
  EXPECT_EQ(o.mode, LossScaleMode::kStatic);
  EXPECT_EQ(Make(o).scale(), 64);
}

}  // namespace
}  // namespace zeroshard
