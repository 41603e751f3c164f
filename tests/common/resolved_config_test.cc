// The resolved configuration: every example resolves, writes and reads back
// to the same bytes and fingerprint; doubles survive bit for bit; a broken
// file is an error naming the key.
#include "common/resolved_config.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_seed.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

using nlohmann::json;

std::vector<std::string> Examples() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("examples")) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  return out;
}

TEST(ResolvedConfigTest, EveryExampleRoundTripsToTheSameBytes) {
  const std::vector<std::string> examples = Examples();
  ASSERT_FALSE(examples.empty());
  for (const std::string& path : examples) {
    SCOPED_TRACE(path);
    auto parsed = LoadTrainingConfig(path, {.servers = 3, .workers = 2,
                                            .steps = 77});
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const std::string text = ResolvedConfigJson(parsed->config);
    auto back = ParseResolvedConfig(text);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(ResolvedConfigJson(*back), text);
    EXPECT_EQ(CanonicalJson(*back), CanonicalJson(parsed->config));
    EXPECT_EQ(ConfigFingerprint(*back), ConfigFingerprint(parsed->config));
    EXPECT_EQ(back->cluster.steps, 77u);
    EXPECT_EQ(back->cluster.workers, 2);
    EXPECT_EQ(back->cluster.servers, 3);
    EXPECT_EQ(back->cluster.step_timeout_s,
              parsed->config.cluster.step_timeout_s);
    EXPECT_EQ(back->cluster.metrics_path, parsed->config.cluster.metrics_path);
  }
}

TEST(ResolvedConfigTest, DoublesAndCountsSurviveBitForBit) {
  auto parsed = LoadTrainingConfig("examples/gpt-small.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const uint64_t seed = ::zeroshard::testing::TestSeed();
  SCOPED_TRACE(::zeroshard::testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 100; ++trial) {
    TrainingConfig c = parsed->config;
    c.optimizer.lr = 1e-2 * u(rng) + 1e-9;
    c.optimizer.min_lr = c.optimizer.lr * u(rng);
    c.optimizer.warmup_type = trial % 2 ? WarmupType::kLog : WarmupType::kLinear;
    c.optimizer.warmup_start_lr = c.optimizer.lr * u(rng);
    c.optimizer.beta2 = 1 - 1e-3 * u(rng);
    c.optimizer.eps = 1e-10 * (1 + u(rng));
    c.gradient_clipping = 10 * u(rng);
    c.cluster.init_std = 0.1 * u(rng) + 1e-6;
    c.cluster.seed = rng();
    c.cluster.data.seed = rng();
    c.cluster.server_addresses = {"10.0.0.1:7000", "[::1]:7001"};
    c.cluster.servers = 2;
    auto back = ParseResolvedConfig(ResolvedConfigJson(c));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(std::memcmp(&back->optimizer.lr, &c.optimizer.lr, 8), 0);
    EXPECT_EQ(std::memcmp(&back->optimizer.min_lr, &c.optimizer.min_lr, 8), 0);
    EXPECT_EQ(back->optimizer, c.optimizer);
    EXPECT_EQ(back->gradient_clipping, c.gradient_clipping);
    EXPECT_EQ(back->cluster.init_std, c.cluster.init_std);
    EXPECT_EQ(back->cluster.seed, c.cluster.seed);
    EXPECT_EQ(back->cluster.data.seed, c.cluster.data.seed);
    EXPECT_EQ(back->cluster.server_addresses, c.cluster.server_addresses);
  }
}

// Edits the written file with `edit`, then expects an error containing
// `expected`.
void ExpectError(const std::function<void(json&)>& edit,
                 const std::string& expected) {
  auto parsed = LoadTrainingConfig("examples/gpt-small.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  json j = json::parse(ResolvedConfigJson(parsed->config));
  edit(j);
  auto back = ParseResolvedConfig(j.dump());
  ASSERT_FALSE(back.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(back.status().message().find(expected), std::string::npos)
      << back.status();
}

TEST(ResolvedConfigTest, BrokenFilesAreErrorsNamingTheKey) {
  ExpectError([](json& j) { j["config"]["cluster"].erase("steps"); },
              "\"config.cluster.steps\" is missing");
  ExpectError([](json& j) { j["config"]["optimizer"]["lrr"] = 1; },
              "\"config.optimizer.lrr\" is not a field");
  ExpectError([](json& j) { j["config"]["cluster"]["workers"] = "2"; },
              "\"config.cluster.workers\" is not an integer");
  ExpectError([](json& j) { j["config"]["cluster"]["steps"] = -5; },
              "\"config.cluster.steps\" is negative");
  ExpectError(
      [](json& j) {
        j["config"]["cluster"]["workers"] = 18446744073709551615ull;
      },
      "\"config.cluster.workers\" is out of range");
  ExpectError([](json& j) { j["config"]["cluster"]["servers"] = 4294967297ll; },
              "\"config.cluster.servers\" is out of range");
  ExpectError([](json& j) { j["config"]["cluster"]["step_timeout_s"] = 0; },
              "step_seconds");
  ExpectError([](json& j) { j["config"]["steps_per_print"] = 0; },
              "steps_per_print");
  ExpectError([](json& j) { j["config"]["precision"] = "fp8"; },
              "\"config.precision\" is not one of");
  ExpectError([](json& j) { j["config"]["cluster"]["model"]["heads"] = 3; },
              "heads");
  ExpectError([](json& j) { j["zeroshard_resolved_config"] = 2; },
              "reads version 1");
  ExpectError([](json& j) { j["extra"] = 1; }, "unknown top-level key");
}

TEST(ResolvedConfigTest, ADeepSpeedFileSaysHowToResolveIt) {
  auto back = LoadResolvedConfig("examples/gpt-small.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("zeroshard-ctl config"),
            std::string::npos)
      << back.status();
  EXPECT_NE(back.status().message().find("examples/gpt-small.json"),
            std::string::npos);
  EXPECT_EQ(LoadResolvedConfig("no/such/file.json").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace zeroshard
