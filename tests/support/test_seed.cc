#include "tests/support/test_seed.h"

#include <cstdio>
#include <cstdlib>
#include <random>

#include "gtest/gtest.h"

namespace zeroshard::testing {

uint64_t TestSeed() {
  uint64_t seed = 0;
  const char* env = std::getenv("ZS_TEST_SEED");
  if (env != nullptr && *env != '\0') {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  std::printf("%s\n", SeedTrace(seed).c_str());
  std::fflush(stdout);
  if (::testing::UnitTest::GetInstance()->current_test_info() != nullptr) {
    ::testing::Test::RecordProperty("seed", std::to_string(seed));
  }
  return seed;
}

std::string SeedTrace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (ZS_TEST_SEED=" +
         std::to_string(seed) + " replays)";
}

}  // namespace zeroshard::testing
