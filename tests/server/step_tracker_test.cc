#include "server/step_tracker.h"

#include <atomic>
#include <random>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

// 3 chunks of 128 over [1024, 1024 + 320): the last one is 64 long.
constexpr FlatRange kTrackedOwned{1024, 1344};

TEST(StepTrackerTest, ChunkCompletesWhenEveryElementIsApplied) {
  StepTracker t(kTrackedOwned, 128);
  ASSERT_EQ(t.num_chunks(), 3u);
  FlatRange first_half{1024, 1088}, second_half{1088, 1152};
  auto a = t.Claim(0, {0.5, false}, {&first_half, 1});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->segments.size(), 1u);
  EXPECT_EQ(a->segments[0].adam_t, 1u);
  EXPECT_EQ(t.Complete(*a), 0u);
  EXPECT_EQ(t.version(0), 0u);
  auto b = t.Claim(0, {0.5, false}, {&second_half, 1});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(t.Complete(*b), 1u);
  EXPECT_EQ(t.version(0), 1u);
  EXPECT_EQ(t.version(1), 0u);
  StepTracker::Summary s = t.Summarize();
  EXPECT_EQ(s.min_version, 0u);
  EXPECT_EQ(s.max_version, 1u);
}

TEST(StepTrackerTest, SplitsRangesAtChunkBoundaries) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange all = kTrackedOwned;
  auto c = t.Claim(0, {1, false}, {&all, 1});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->segments.size(), 3u);
  EXPECT_EQ(c->segments[2].range, (FlatRange{1280, 1344}));
  EXPECT_EQ(t.Complete(*c), 3u);
  EXPECT_EQ(t.Summarize().min_adam_step, 1u);
}

TEST(StepTrackerTest, RetriesAreDuplicatesBeforeAndAfterCompletion) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange r{1030, 1100};
  auto c = t.Claim(0, {1, false}, {&r, 1});
  ASSERT_TRUE(c.ok());
  t.Complete(*c);
  auto again = t.Claim(0, {1, false}, {&r, 1});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->segments.empty());
  EXPECT_EQ(again->duplicate_elems, r.size());
  // A union of two earlier pieces retried as one is a duplicate too.
  FlatRange rest_a{1024, 1030}, rest_b{1100, 1152};
  ASSERT_TRUE(t.Claim(0, {1, false}, {&rest_a, 1}).ok());
  auto last = t.Claim(0, {1, false}, {&rest_b, 1});
  ASSERT_TRUE(last.ok());
  t.Complete(*last);
  EXPECT_EQ(t.version(0), 0u);  // rest_a was claimed but never completed
  FlatRange chunk0{1024, 1152};
  auto dup = t.Claim(0, {1, false}, {&chunk0, 1});
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->duplicate_elems, 128u);
}

TEST(StepTrackerTest, PartialOverlapIsInvalidAndChangesNothing) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange r{1024, 1088};
  auto c = t.Claim(0, {1, false}, {&r, 1});
  ASSERT_TRUE(c.ok());
  t.Complete(*c);
  FlatRange ranges[] = {{1152, 1200}, {1080, 1100}};
  auto bad = t.Claim(0, {1, false}, ranges);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("partially overlaps"),
            std::string::npos);
  // The first range of the rejected claim was not recorded.
  auto ok = t.Claim(0, {1, false}, {&ranges[0], 1});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->segments.size(), 1u);
}

TEST(StepTrackerTest, StaleAndFutureStepsAreAborted) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange all = kTrackedOwned;
  for (uint64_t s = 0; s < 2; ++s) {
    auto c = t.Claim(s, {1, false}, {&all, 1});
    ASSERT_TRUE(c.ok());
    t.Complete(*c);
  }
  auto stale = t.Claim(0, {1, false}, {&all, 1});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(stale.status().message().find("stale"), std::string::npos);
  auto future = t.Claim(3, {1, false}, {&all, 1});
  EXPECT_EQ(future.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(future.status().message().find("version 2"), std::string::npos);
  auto dup = t.Claim(1, {1, false}, {&all, 1});
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->duplicate_elems, all.size());
}

TEST(StepTrackerTest, ParamsMustAgreeWithinAStep) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange a{1024, 1088}, b{1088, 1152};
  auto c = t.Claim(0, {0.5, false}, {&a, 1});
  ASSERT_TRUE(c.ok());
  auto other = t.Claim(0, {0.25, false}, {&b, 1});
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  auto skip = t.Claim(0, {0.5, true}, {&b, 1});
  EXPECT_EQ(skip.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(t.CheckParams(0, {0.25, false}).ok());
  EXPECT_TRUE(t.CheckParams(1, {0.25, false}).ok());
}

TEST(StepTrackerTest, SkippedStepAdvancesVersionNotAdamStep) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange all = kTrackedOwned;
  auto c = t.Claim(0, {1, true}, {&all, 1});
  ASSERT_TRUE(c.ok());
  t.Complete(*c);
  auto d = t.Claim(1, {1, false}, {&all, 1});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->segments[0].adam_t, 1u);
  t.Complete(*d);
  StepTracker::Summary s = t.Summarize();
  EXPECT_EQ(s.min_version, 2u);
  EXPECT_EQ(s.min_adam_step, 1u);
}

TEST(StepTrackerTest, WaitersWakeOnceWhenTheirChunkArrives) {
  StepTracker t(kTrackedOwned, 128);
  std::atomic<int> woke{0};
  EXPECT_EQ(t.WaitForVersion(0, 0, [&] { ++woke; }), 0u);
  const uint64_t id0 = t.WaitForVersion(0, 1, [&] { ++woke; });
  const uint64_t id1 = t.WaitForVersion(1, 1, [&] { woke += 10; });
  ASSERT_NE(id0, 0u);
  ASSERT_NE(id1, 0u);
  EXPECT_TRUE(t.CancelWait(id1));
  FlatRange all = kTrackedOwned;
  auto c = t.Claim(0, {1, false}, {&all, 1});
  ASSERT_TRUE(c.ok());
  t.Complete(*c);
  EXPECT_EQ(woke.load(), 1);
  EXPECT_FALSE(t.CancelWait(id0));
}

// A waiter for a later version is not woken by an earlier completion of
// its chunk, nor by another chunk reaching its version; it is woken once,
// by the completion that reaches it. Reset wakes the waiters it satisfies.
TEST(StepTrackerTest, WaiterForALaterVersionWakesOnlyWhenItArrives) {
  StepTracker t(kTrackedOwned, 128);
  std::atomic<int> at2{0}, other{0}, at4{0};
  ASSERT_NE(t.WaitForVersion(0, 2, [&] { ++at2; }), 0u);
  ASSERT_NE(t.WaitForVersion(2, 3, [&] { ++other; }), 0u);
  ASSERT_NE(t.WaitForVersion(1, 4, [&] { ++at4; }), 0u);
  FlatRange chunk0{1024, 1152}, all = kTrackedOwned;
  auto c = t.Claim(0, {1, false}, {&all, 1});
  ASSERT_TRUE(c.ok());
  t.Complete(*c);  // every chunk at version 1
  EXPECT_EQ(at2.load(), 0);
  auto d = t.Claim(1, {1, false}, {&chunk0, 1});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(t.Complete(*d), 1u);  // chunk 0 at version 2
  EXPECT_EQ(at2.load(), 1);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(at4.load(), 0);
  // Reset to version 3: wakes chunk 2's waiter (3 <= 3), not chunk 1's (4).
  const uint64_t adam[] = {2, 2, 2};
  ASSERT_TRUE(t.Reset(3, adam).ok());
  EXPECT_EQ(at2.load(), 1);
  EXPECT_EQ(other.load(), 1);
  EXPECT_EQ(at4.load(), 0);
  auto e = t.Claim(3, {1, false}, {&all, 1});
  ASSERT_TRUE(e.ok());
  t.Complete(*e);
  EXPECT_EQ(at4.load(), 1);
  EXPECT_EQ(at2.load() + other.load(), 2);  // each woken once
}

// The parameters of step s are remembered while a retry of s can still be
// claimed (a duplicate once every chunk is at s + 1), and forgotten when no
// chunk can see s again; a stale push of s is then ABORTED, never applied
// with other parameters.
TEST(StepTrackerTest, ForgetsStepParametersNoChunkCanSeeAgain) {
  StepTracker t(kTrackedOwned, 128);
  FlatRange all = kTrackedOwned;
  auto c = t.Claim(0, {0.5, false}, {&all, 1});
  ASSERT_TRUE(c.ok());
  t.Complete(*c);
  // Every chunk at 1: a retry of step 0 is a duplicate, so its parameters
  // still bind.
  EXPECT_EQ(t.CheckParams(0, {0.25, false}).code(),
            absl::StatusCode::kInvalidArgument);
  auto retry = t.Claim(0, {0.25, false}, {&all, 1});
  EXPECT_EQ(retry.status().code(), absl::StatusCode::kInvalidArgument);
  auto d = t.Claim(1, {0.75, true}, {&all, 1});
  ASSERT_TRUE(d.ok());
  t.Complete(*d);
  // Every chunk at 2: step 0 is gone, step 1 is still remembered.
  EXPECT_TRUE(t.CheckParams(0, {0.25, false}).ok());
  EXPECT_EQ(t.CheckParams(1, {0.75, false}).code(),
            absl::StatusCode::kInvalidArgument);
  auto stale = t.Claim(0, {0.25, false}, {&all, 1});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  // Not forgotten while one chunk lags: chunk 2 stays at 2.
  FlatRange first_two{1024, 1280};
  auto e = t.Claim(2, {2.0, false}, {&first_two, 1});
  ASSERT_TRUE(e.ok());
  t.Complete(*e);
  auto f = t.Claim(3, {3.0, false}, {&first_two, 1});
  ASSERT_TRUE(f.ok());
  t.Complete(*f);
  EXPECT_EQ(t.Summarize().min_version, 2u);
  EXPECT_EQ(t.CheckParams(1, {0.1, false}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.CheckParams(2, {0.1, false}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard
