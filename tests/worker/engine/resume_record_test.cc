// The loss scaler record rank 0 leaves for its successor
// (worker/engine/resume.h): every field reads back exactly, the scale bit
// for bit (awkward doubles included), and malformed records are refused.
// And a failed step's explanation when a server does not answer.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_shard_service.h"
#include "worker/engine/resume.h"

namespace zeroshard {
namespace {

uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

void ExpectRoundTrip(uint64_t step, const LossScalerState& s) {
  const std::string text = LossScalerRecord(step, s);
  SCOPED_TRACE(text);
  auto back = ParseLossScalerRecord(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->first, step);
  EXPECT_EQ(Bits(back->second.scale), Bits(s.scale));
  EXPECT_TRUE(back->second == s);
}

TEST(LossScalerRecordTest, RoundTripsEveryFieldAndTheScaleBitForBit) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  using D = std::numeric_limits<double>;
  const double awkward[] = {1.0,
                            65536.0,
                            std::ldexp(1.0, 1000),
                            std::ldexp(1.0, -1000),
                            0.1,
                            1.0 / 3,
                            std::nextafter(1.0, 2.0),
                            std::nextafter(65536.0, 0.0),
                            D::max(),
                            D::min(),
                            D::denorm_min(),
                            D::min() / 3,  // subnormal
                            D::infinity()};
  LossScalerState s;
  for (double scale : awkward) {
    s.scale = scale;
    ExpectRoundTrip(7, s);
  }
  // Random finite positive doubles of any exponent, and random fields at
  // their extremes.
  for (int i = 0; i < 2000; ++i) {
    double scale;
    do {
      const uint64_t bits = rng() & ~(uint64_t{1} << 63);
      std::memcpy(&scale, &bits, sizeof(scale));
    } while (!std::isfinite(scale));
    s.scale = scale;
    s.hysteresis_left = static_cast<int>(rng());
    s.iteration = rng();
    s.last_overflow_iteration = static_cast<int64_t>(rng());
    s.overflows_at_min = static_cast<int>(rng());
    s.skipped_steps = rng();
    ExpectRoundTrip(rng(), s);
    if (HasFailure()) return;
  }
  s.iteration = UINT64_MAX;
  s.skipped_steps = UINT64_MAX;
  s.last_overflow_iteration = INT64_MIN;
  s.hysteresis_left = INT32_MIN;
  s.overflows_at_min = INT32_MAX;
  ExpectRoundTrip(UINT64_MAX, s);
  ExpectRoundTrip(0, LossScalerState{});  // the defaults: -1 included
}

TEST(LossScalerRecordTest, MalformedRecordsAreRefused) {
  for (const std::string bad : {
           "",
           "3",
           "3 1024 2 10 -1 0",            // six fields
           "3 1024 2 10 -1 0 0 0",        // eight
           "x 1024 2 10 -1 0 0",          // step not a number
           "-3 1024 2 10 -1 0 0",         // step negative
           "18446744073709551616 1 2 10 -1 0 0",  // step overflows
           "3 scale 2 10 -1 0 0",
           "3 1024 2.5 10 -1 0 0",        // hysteresis not an integer
           "3 1024 2 -10 -1 0 0",         // iteration negative
           "3 1024 2 10 -1 0 99999999999999999999",
           "3 1024 2 10 -1 4294967296 0",  // overflows_at_min beyond int
           "3,1024,2,10,-1,0,0",
       }) {
    auto parsed = ParseLossScalerRecord(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << "\"" << bad << "\"";
    EXPECT_NE(parsed.status().message().find(bad), std::string::npos)
        << parsed.status();
  }
  // Runs of spaces between fields are fine.
  auto spaced = ParseLossScalerRecord("  3  1024 2 10 -1 0 5 ");
  ASSERT_TRUE(spaced.ok()) << spaced.status();
  EXPECT_EQ(spaced->first, 3u);
  EXPECT_EQ(spaced->second.scale, 1024.0);
  EXPECT_EQ(spaced->second.skipped_steps, 5u);
}

// A server that stays silent is waited for, as long as asked and no longer,
// then named as unreachable beside the step's own error.
TEST(ExplainServerRestartTest, ASilentServerIsWaitedForThenNamed) {
  const int port = testing::UnusedPort();
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ShardClientOptions options;
  options.retry.max_attempts = 1;
  auto cluster = ShardCluster::Connect({address}, options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const absl::Time start = absl::Now();
  const absl::Status got = ExplainServerRestart(
      **cluster, 7, absl::UnavailableError("PushGrad(step 7) failed"),
      absl::Milliseconds(600));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(
      got.message(), "server 0 (" + address + ") unreachable since step 7"))
      << got;
  EXPECT_TRUE(absl::StrContains(got.message(), "PushGrad(step 7) failed"))
      << got;
  EXPECT_GE(took, absl::Milliseconds(600));
  EXPECT_LT(took, absl::Seconds(10));
}

}  // namespace
}  // namespace zeroshard
