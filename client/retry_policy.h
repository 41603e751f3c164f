// The client's retry rule and backoff (docs/DESIGN.md, "Errors"):
// UNAVAILABLE is retried with exponential backoff, bounded in attempts and in
// total time; every other code is returned to the caller (ABORTED means
// "retry the step", which is the engine's decision, not the transport's).
//
//   RetryPolicy policy;                       // 5 attempts, 50 ms .. 2 s
//   for (int attempt = 0;; ++attempt) {
//     absl::Status s = Call();
//     if (!ShouldRetry(policy, s, attempt, absl::Now() - start)) return s;
//     absl::SleepFor(BackoffDelay(policy, attempt, rng_bits));
//   }
#ifndef ZEROSHARD_CLIENT_RETRY_POLICY_H_
#define ZEROSHARD_CLIENT_RETRY_POLICY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace zeroshard {

struct RetryPolicy {
  // Attempts in all, the first included; >= 1.
  int max_attempts = 5;
  // Delay before the first retry; each further retry multiplies it.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  double multiplier = 2.0;
  // Cap on one delay.
  absl::Duration max_backoff = absl::Seconds(2);
  // No retry starts once this much time has passed since the first attempt.
  absl::Duration max_total = absl::Seconds(30);
};

// True for the codes the transport retries: UNAVAILABLE only.
bool IsRetryableCode(absl::StatusCode code);

// Whether attempt `attempt` (0-based) that ended in `status` after `elapsed`
// since the first attempt should be followed by another.
bool ShouldRetry(const RetryPolicy& policy, const absl::Status& status,
                 int attempt, absl::Duration elapsed);

// Delay before retry number attempt+1: min(max_backoff, initial *
// multiplier^attempt), scaled by a jitter factor in [0.5, 1.0] taken from
// `random_bits`. Always in [initial/2, max_backoff].
absl::Duration BackoffDelay(const RetryPolicy& policy, int attempt,
                            uint64_t random_bits);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_RETRY_POLICY_H_
