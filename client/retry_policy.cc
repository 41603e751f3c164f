#include "client/retry_policy.h"

#include <algorithm>
#include <cmath>


namespace zeroshard {

bool IsRetryableCode(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable;
}

bool ShouldRetry(const RetryPolicy& policy, const absl::Status& status,
                 int attempt, absl::Duration elapsed) {
  if (status.ok() || !IsRetryableCode(status.code())) return false;
  if (attempt + 1 >= policy.max_attempts) return false;
  return elapsed < policy.max_total;
}

absl::Duration BackoffDelay(const RetryPolicy& policy, int attempt,
                            uint64_t random_bits) {
  const double base = absl::ToDoubleSeconds(policy.initial_backoff) *
                      std::pow(policy.multiplier, std::max(0, attempt));
  const double capped =
      std::min(base, absl::ToDoubleSeconds(policy.max_backoff));
  // Jitter in [0.5, 1.0] from the top 53 bits.
  const double unit = static_cast<double>(random_bits >> 11) * 0x1.0p-53;
  const double jittered = capped * (0.5 + 0.5 * unit);
  const absl::Duration lo =
      std::min(policy.initial_backoff / 2, policy.max_backoff);
  return std::clamp(absl::Seconds(jittered), lo, policy.max_backoff);
}

}  // namespace zeroshard
