// The seed of a test's random inputs, so that any failure replays:
// ZS_TEST_SEED when it is set, else a fresh one from std::random_device.
// Either way it is printed ("seed N: ZS_TEST_SEED=N replays") and recorded
// as the test's "seed" property (in the XML / JSON report), and the caller
// adds it to every failure message with SCOPED_TRACE.
//
//   const uint64_t seed = testing::TestSeed();
//   SCOPED_TRACE(testing::SeedTrace(seed));
//   std::mt19937_64 rng(seed);
#ifndef ZEROSHARD_TESTS_SUPPORT_TEST_SEED_H_
#define ZEROSHARD_TESTS_SUPPORT_TEST_SEED_H_

#include <cstdint>
#include <string>

namespace zeroshard::testing {

uint64_t TestSeed();

// "seed N (ZS_TEST_SEED=N replays)".
std::string SeedTrace(uint64_t seed);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_TEST_SEED_H_
