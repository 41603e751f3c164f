// StepTracker's snapshot captures, attempts and Reset: arming refused when a
// chunk is past the step or has part of it claimed, the chunks already at
// the step handed back, capture marks on claims of armed steps only,
// counted disarming, Reset's refusals and what it sets and wakes.
#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/step_tracker.h"

namespace zeroshard {
namespace {

// 5 chunks of 128 over [2048, 2048 + 600): the last one is 88 long.
constexpr FlatRange kCaptureOwned{2048, 2648};
constexpr uint64_t kCaptureChunk = 128;

FlatRange ChunkRange(size_t c) {
  const uint64_t b = kCaptureOwned.begin + c * kCaptureChunk;
  return {b, std::min(kCaptureOwned.end, b + kCaptureChunk)};
}

std::string RangeText(FlatRange r) {
  return absl::StrCat("[", r.begin, ", ", r.end, ")");
}

// Applies step `step` to the whole of chunk c.
void CompleteChunk(StepTracker& t, size_t c, uint64_t step, bool skip = false) {
  const FlatRange r = ChunkRange(c);
  auto claim = t.Claim(step, {1.0, skip}, {&r, 1});
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_EQ(claim->segments.size(), 1u);
  t.Complete(*claim);
  ASSERT_EQ(t.version(c), step + 1);
}

TEST(StepTrackerCaptureTest, ArmingIsRefusedWhenAChunkIsPastTheStep) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  StepTracker t(kCaptureOwned, kCaptureChunk);
  ASSERT_EQ(t.num_chunks(), 5u);
  // A random chunk runs two steps ahead of the others.
  const size_t ahead = rng() % t.num_chunks();
  CompleteChunk(t, ahead, 0);
  CompleteChunk(t, ahead, 1);
  for (uint64_t step : {0, 1}) {
    auto armed = t.ArmCapture(step);
    ASSERT_EQ(armed.status().code(), absl::StatusCode::kFailedPrecondition)
        << step;
    EXPECT_NE(armed.status().message().find(RangeText(ChunkRange(ahead))),
              std::string::npos)
        << armed.status();
    EXPECT_NE(armed.status().message().find("version 2"), std::string::npos)
        << armed.status();
  }
  // Refused arms leave nothing armed: no claim is marked, Reset goes on.
  const FlatRange other = ChunkRange((ahead + 1) % t.num_chunks());
  auto claim = t.Claim(0, {1.0, false}, {&other, 1});
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_FALSE(claim->capture);
  t.Complete(*claim);
  // At the step, untouched: accepted, and that chunk is handed back.
  auto armed = t.ArmCapture(2);
  ASSERT_TRUE(armed.ok()) << armed.status();
  EXPECT_EQ(*armed, std::vector<size_t>{ahead});
  t.DisarmCapture(2);
  EXPECT_TRUE(t.Reset(0, std::vector<uint64_t>(5, 0)).ok());
}

TEST(StepTrackerCaptureTest, ArmingIsRefusedWhilePartOfTheStepIsClaimed) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  StepTracker t(kCaptureOwned, kCaptureChunk);
  const size_t c = rng() % t.num_chunks();
  const FlatRange chunk = ChunkRange(c);
  // A random strict part of the chunk claimed for step 0.
  const uint64_t len = 1 + rng() % (chunk.size() - 1);
  const uint64_t begin = chunk.begin + rng() % (chunk.size() - len + 1);
  const FlatRange part{begin, begin + len};
  auto claim = t.Claim(0, {1.0, false}, {&part, 1});
  ASSERT_TRUE(claim.ok()) << claim.status();
  for (bool completed : {false, true}) {
    SCOPED_TRACE(completed);
    auto armed = t.ArmCapture(0);
    ASSERT_EQ(armed.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(armed.status().message().find(RangeText(chunk)),
              std::string::npos)
        << armed.status();
    EXPECT_NE(armed.status().message().find("part of that step"),
              std::string::npos)
        << armed.status();
    if (!completed) t.Complete(*claim);  // applied, the chunk still partial
  }
  EXPECT_EQ(t.Summarize().partial_chunks, 1u);
  // A later step is fine: every chunk is below it.
  auto later = t.ArmCapture(1);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_TRUE(later->empty());
}

TEST(StepTrackerCaptureTest, ArmingReturnsTheChunksAlreadyAtTheStep) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  StepTracker t(kCaptureOwned, kCaptureChunk);
  // Random chunks advance to version 3, the others stay lower.
  std::vector<size_t> at3;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    const uint64_t v = rng() % 4;
    for (uint64_t s = 0; s < v; ++s) CompleteChunk(t, c, s);
    if (v == 3) at3.push_back(c);
  }
  auto armed = t.ArmCapture(3);
  ASSERT_TRUE(armed.ok()) << armed.status();
  EXPECT_EQ(*armed, at3);
}

TEST(StepTrackerCaptureTest, OnlyClaimsOfAnArmedStepCarryCapture) {
  StepTracker t(kCaptureOwned, kCaptureChunk);
  ASSERT_TRUE(t.ArmCapture(1).ok());
  ASSERT_TRUE(t.ArmCapture(3).ok());
  for (uint64_t step = 0; step < 5; ++step) {
    SCOPED_TRACE(step);
    // Two halves of the owned range, in two claims.
    const uint64_t mid = kCaptureOwned.begin + 300;
    const FlatRange halves[] = {{kCaptureOwned.begin, mid}, {mid, kCaptureOwned.end}};
    for (const FlatRange& h : halves) {
      auto claim = t.Claim(step, {0.5, step == 3}, {&h, 1});
      ASSERT_TRUE(claim.ok()) << claim.status();
      EXPECT_EQ(claim->capture, step == 1 || step == 3);
      t.Complete(*claim);
    }
    // A duplicate of an armed step is marked too, with nothing to apply.
    auto dup = t.Claim(step, {0.5, step == 3}, {&halves[0], 1});
    ASSERT_TRUE(dup.ok()) << dup.status();
    EXPECT_TRUE(dup->segments.empty());
  }
}

TEST(StepTrackerCaptureTest, EachArmNeedsItsOwnDisarm) {
  StepTracker t(kCaptureOwned, kCaptureChunk);
  const FlatRange first = ChunkRange(0);
  ASSERT_TRUE(t.ArmCapture(0).ok());
  ASSERT_TRUE(t.ArmCapture(0).ok());
  t.DisarmCapture(7);  // never armed: no effect
  auto claim = [&] {
    auto c = t.Claim(0, {1.0, false}, {&first, 1});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() && c->capture;
  };
  EXPECT_TRUE(claim());
  t.DisarmCapture(0);
  EXPECT_TRUE(claim());  // one arm left
  EXPECT_EQ(t.Reset(0, std::vector<uint64_t>(5, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
  t.DisarmCapture(0);
  EXPECT_FALSE(claim());
  t.DisarmCapture(0);  // one too many: harmless
  EXPECT_FALSE(claim());
}

TEST(StepTrackerCaptureTest, ResetIsRefusedWhileClaimedOrArmed) {
  StepTracker t(kCaptureOwned, kCaptureChunk);
  const FlatRange part{ChunkRange(2).begin + 5, ChunkRange(2).begin + 40};
  auto claim = t.Claim(0, {1.0, false}, {&part, 1});
  ASSERT_TRUE(claim.ok());
  absl::Status s = t.Reset(4, std::vector<uint64_t>(5, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(RangeText(ChunkRange(2))), std::string::npos)
      << s;
  t.Complete(*claim);  // applied; the chunk is still part way through step 0
  EXPECT_EQ(t.Reset(4, std::vector<uint64_t>(5, 4)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.version(2), 0u);
  const FlatRange rest{part.end, ChunkRange(2).end};
  const FlatRange head{ChunkRange(2).begin, part.begin};
  const FlatRange pieces[] = {head, rest};
  auto more = t.Claim(0, {1.0, false}, pieces);
  ASSERT_TRUE(more.ok()) << more.status();
  t.Complete(*more);
  EXPECT_EQ(t.version(2), 1u);

  ASSERT_TRUE(t.ArmCapture(5).ok());
  s = t.Reset(4, std::vector<uint64_t>(5, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("snapshot"), std::string::npos) << s;
  t.DisarmCapture(5);
  // A wrong number of Adam step counts.
  EXPECT_EQ(t.Reset(4, std::vector<uint64_t>(4, 4)).code(),
            absl::StatusCode::kInvalidArgument);
  // None of the refusals changed anything.
  for (size_t c = 0; c < 5; ++c) {
    EXPECT_EQ(t.version(c), c == 2 ? 1u : 0u);
    EXPECT_EQ(t.adam_t(c), c == 2 ? 1u : 0u);
  }
  EXPECT_TRUE(t.Reset(4, std::vector<uint64_t>(5, 4)).ok());
}

TEST(StepTrackerCaptureTest, ResetSetsVersionsAdamStepsAndWakesWaiters) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  StepTracker t(kCaptureOwned, kCaptureChunk);
  // Step 0 was pushed with one coefficient; Reset forgets it.
  const FlatRange part = ChunkRange(1);
  auto c0 = t.Claim(0, {0.25, false}, {&part, 1});
  ASSERT_TRUE(c0.ok());
  t.Complete(*c0);

  const uint64_t version = 2 + rng() % 50;
  std::vector<uint64_t> adam(5);
  for (uint64_t& a : adam) a = rng() % (version + 1);
  // Waiters below, at and above the version.
  std::atomic<int> woken[3] = {0, 0, 0};
  const uint64_t ids[3] = {
      t.WaitForVersion(0, version - 1, [&] { ++woken[0]; }),
      t.WaitForVersion(3, version, [&] { ++woken[1]; }),
      t.WaitForVersion(4, version + 1, [&] { ++woken[2]; })};
  for (uint64_t id : ids) ASSERT_NE(id, 0u);
  ASSERT_TRUE(t.Reset(version, adam).ok());
  EXPECT_EQ(woken[0].load(), 1);
  EXPECT_EQ(woken[1].load(), 1);
  EXPECT_EQ(woken[2].load(), 0);
  EXPECT_FALSE(t.CancelWait(ids[0]));
  EXPECT_TRUE(t.CancelWait(ids[2]));
  for (size_t c = 0; c < 5; ++c) {
    EXPECT_EQ(t.version(c), version);
    EXPECT_EQ(t.adam_t(c), adam[c]);
  }
  const StepTracker::Summary s = t.Summarize();
  EXPECT_EQ(s.min_version, version);
  EXPECT_EQ(s.max_version, version);
  EXPECT_EQ(s.min_adam_step, *std::min_element(adam.begin(), adam.end()));
  EXPECT_EQ(s.partial_chunks, 0u);
  // The next claim is of step `version`, each chunk at its own t + 1.
  const FlatRange all = kCaptureOwned;
  auto next = t.Claim(version, {2.0, false}, {&all, 1});
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_EQ(next->segments.size(), 5u);
  for (const ClaimedSegment& seg : next->segments) {
    EXPECT_EQ(seg.adam_t, adam[seg.chunk] + 1);
  }
  EXPECT_EQ(t.Complete(*next), 5u);
  // A restore to an earlier version: steps run again with new parameters.
  ASSERT_TRUE(t.Reset(0, std::vector<uint64_t>(5, 0)).ok());
  auto again = t.Claim(0, {0.75, true}, {&part, 1});
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(StepTrackerCaptureTest, LowerAttemptsAreAbortedOnceAHigherOneWasSeen) {
  StepTracker t(kCaptureOwned, kCaptureChunk);
  EXPECT_EQ(t.attempt(), 0u);
  ASSERT_TRUE(t.NoteAttempt(3).ok());
  EXPECT_EQ(t.attempt(), 3u);
  ASSERT_TRUE(t.NoteAttempt(3).ok());  // the same attempt again
  absl::Status s = t.NoteAttempt(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_NE(s.message().find("attempt 2"), std::string::npos) << s;
  EXPECT_NE(s.message().find("attempt 3"), std::string::npos) << s;
  EXPECT_EQ(t.attempt(), 3u);

  // A claim of a lower attempt is refused before anything is recorded:
  // neither its elements nor its step parameters.
  const FlatRange r = ChunkRange(0);
  auto old = t.Claim(0, {0.5, false}, {&r, 1}, /*attempt=*/1);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(t.Summarize().partial_chunks, 0u);
  auto now = t.Claim(0, {0.125, false}, {&r, 1}, /*attempt=*/3);
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(now->segments.size(), 1u);  // claimable: not a duplicate
  t.Complete(*now);

  // A claim of a newer attempt that is refused for another reason (here a
  // step ahead of the chunks) records nothing, its attempt included: one
  // bad call cannot make the run's workers restart.
  const FlatRange r1 = ChunkRange(1);
  auto ahead = t.Claim(5, {1.0, false}, {&r1, 1}, /*attempt=*/4);
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(ahead.status().message().find("ahead"), std::string::npos);
  EXPECT_EQ(t.attempt(), 3u);
  EXPECT_TRUE(t.CheckAttempt(3).ok());
  // An accepted claim of attempt 4 records it; attempt 3 is then refused.
  auto fine = t.Claim(0, {0.125, false}, {&r1, 1}, 4);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->segments.size(), 1u);
  EXPECT_EQ(t.attempt(), 4u);
  EXPECT_EQ(t.CheckAttempt(3).code(), absl::StatusCode::kAborted);
  const FlatRange r2 = ChunkRange(2);
  EXPECT_EQ(t.Claim(0, {0.125, false}, {&r2, 1}, 3).status().code(),
            absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace zeroshard
