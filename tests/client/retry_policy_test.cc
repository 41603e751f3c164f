// The retry rule and backoff bounds.
#include "client/retry_policy.h"

#include <random>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(RetryPolicyTest, OnlyUnavailableIsRetried) {
  RetryPolicy p;
  EXPECT_TRUE(ShouldRetry(p, absl::UnavailableError("x"), 0, absl::ZeroDuration()));
  for (absl::Status s :
       {absl::OkStatus(), absl::AbortedError("x"), absl::InvalidArgumentError("x"),
        absl::FailedPreconditionError("x"), absl::DeadlineExceededError("x"),
        absl::CancelledError("x"), absl::DataLossError("x")}) {
    EXPECT_FALSE(ShouldRetry(p, s, 0, absl::ZeroDuration())) << s;
  }
}

TEST(RetryPolicyTest, AttemptsAndTotalTimeAreBounded) {
  RetryPolicy p;
  p.max_attempts = 4;
  p.max_total = absl::Seconds(3);
  const absl::Status u = absl::UnavailableError("x");
  EXPECT_TRUE(ShouldRetry(p, u, 2, absl::Seconds(1)));
  EXPECT_FALSE(ShouldRetry(p, u, 3, absl::Seconds(1)));
  EXPECT_FALSE(ShouldRetry(p, u, 0, absl::Seconds(3)));
  p.max_attempts = 1;
  EXPECT_FALSE(ShouldRetry(p, u, 0, absl::ZeroDuration()));
}

TEST(RetryPolicyTest, BackoffGrowsWithinBounds) {
  RetryPolicy p;
  p.initial_backoff = absl::Milliseconds(10);
  p.max_backoff = absl::Milliseconds(500);
  p.multiplier = 2;
  std::mt19937_64 rng(5);
  for (int attempt = 0; attempt < 40; ++attempt) {
    const double cap = std::min(10.0 * std::pow(2.0, attempt), 500.0);
    for (int i = 0; i < 50; ++i) {
      const absl::Duration d = BackoffDelay(p, attempt, rng());
      EXPECT_GE(d, absl::Milliseconds(cap / 2) - absl::Microseconds(1));
      EXPECT_LE(d, absl::Milliseconds(cap) + absl::Microseconds(1));
    }
  }
  // Extremes of the jitter.
  EXPECT_EQ(BackoffDelay(p, 0, 0), absl::Milliseconds(5));
  EXPECT_LE(BackoffDelay(p, 100, ~uint64_t{0}), absl::Milliseconds(500));
}

}  // namespace
}  // namespace zeroshard
