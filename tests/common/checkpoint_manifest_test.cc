// Checkpoint manifests: JSON round trip, validation of the shard list,
// which folders count as checkpoints, and pruning.
#include "common/checkpoint_manifest.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

namespace fs = std::filesystem;

std::string MakeManifestDir() { return testing::MakeTempDir("zs_manifest_"); }

CheckpointManifest TwoShards(uint64_t step) {
  CheckpointManifest m;
  m.step = step;
  m.num_servers = 2;
  m.total_elems = 1000;
  m.model_fingerprint = 0xFEEDFACECAFEBEEFull;
  m.config_fingerprint = 0x0123456789ABCDEFull;
  m.model.partition_count = 2;
  m.model.units.push_back({"embedding", {{"wte.weight", {16, 8}}, {"wpe.weight", {4, 8}}}});
  m.loss_scaler.scale = 65536;
  m.loss_scaler.hysteresis_left = 2;
  m.loss_scaler.iteration = step;
  m.loss_scaler.last_overflow_iteration = -1;
  m.loss_scaler.skipped_steps = 3;
  m.data_position = step;
  m.schedule_total_steps = 100;
  m.optimizer_json = R"({"kind":"LION","lr":0.0001,"paramGroups":[{"name":"norms"}]})";
  m.shards = {{0, {0, 512}, "shard-0-of-2.bin", 0xFFFFFFFFFFFFFFFFull, 2100},
              {1, {512, 1000}, "shard-1-of-2.bin", 42, 2000}};
  return m;
}

TEST(CheckpointManifestTest, RoundTripsEveryField) {
  const CheckpointManifest m = TwoShards(30);
  auto back = ParseCheckpointManifest(CheckpointManifestJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(CheckpointManifestJson(*back), CheckpointManifestJson(m));
  EXPECT_EQ(back->shards[0].checksum, 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(back->loss_scaler, m.loss_scaler);
  EXPECT_EQ(back->model_fingerprint, m.model_fingerprint);
  EXPECT_EQ(back->schedule_total_steps, 100u);
  // The optimizer is kept as a JSON object (not a string of JSON), and read
  // back as its text; a manifest without one reads as "".
  EXPECT_TRUE(nlohmann::json::parse(CheckpointManifestJson(m))["optimizer"].is_object());
  EXPECT_EQ(nlohmann::json::parse(back->optimizer_json),
            nlohmann::json::parse(m.optimizer_json));
  CheckpointManifest bare = m;
  bare.optimizer_json.clear();
  auto without = ParseCheckpointManifest(CheckpointManifestJson(bare));
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->optimizer_json, "");
  EXPECT_EQ(CheckpointFolderName(30), "step-00000000000000000030");
}

TEST(CheckpointManifestTest, ShardListsThatDoNotTileTheSpaceAreRefused) {
  CheckpointManifest m = TwoShards(1);
  m.shards[1].owned.begin = 513;  // a gap
  EXPECT_EQ(ValidateCheckpointManifest(m).code(),
            absl::StatusCode::kInvalidArgument);
  m = TwoShards(1);
  m.shards[1].owned.end = 999;  // short of the total
  EXPECT_FALSE(ValidateCheckpointManifest(m).ok());
  m = TwoShards(1);
  std::swap(m.shards[0], m.shards[1]);  // out of order
  EXPECT_FALSE(ValidateCheckpointManifest(m).ok());
  m = TwoShards(1);
  m.shards[0].file = "../elsewhere.bin";
  EXPECT_NE(ValidateCheckpointManifest(m).message().find("plain name"),
            std::string::npos);
  m = TwoShards(1);
  m.shards.pop_back();
  EXPECT_FALSE(ValidateCheckpointManifest(m).ok());
  // The same checks apply to what is read back.
  std::string text = CheckpointManifestJson(TwoShards(1));
  text.replace(text.find("\"owned_begin\": 512"), 18, "\"owned_begin\": 500");
  EXPECT_EQ(ParseCheckpointManifest(text).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCheckpointManifest("{}").status().code(),
            absl::StatusCode::kDataLoss);
  // Numbers too large for their field are refused, not cut down.
  text = CheckpointManifestJson(TwoShards(1));
  text.replace(text.find("\"num_servers\": 2"), 16,
               "\"num_servers\": 4294967298");
  auto wide = ParseCheckpointManifest(text);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("out of range"), std::string::npos)
      << wide.status();
  text = CheckpointManifestJson(TwoShards(1));
  text.replace(text.find("\"hysteresis_left\": 2"), 20,
               "\"hysteresis_left\": \"2\"");
  EXPECT_EQ(ParseCheckpointManifest(text).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CheckpointManifestTest, OnlyFoldersWithAValidManifestAreCheckpoints) {
  const std::string dir = MakeManifestDir();
  for (uint64_t step : {10, 15, 20, 30, 40}) {
    fs::create_directories(fs::path(dir) / CheckpointFolderName(step));
  }
  ASSERT_TRUE(WriteCheckpointManifest(dir, TwoShards(10)).ok());
  ASSERT_TRUE(WriteCheckpointManifest(dir, TwoShards(20)).ok());
  // 15 and 30: no manifest (cut short, or being written). 40: a manifest
  // that does not parse. "junk": not one of ours.
  std::ofstream(fs::path(dir) / CheckpointFolderName(40) /
                kCheckpointManifestName)
      << "{\"zeroshard_checkpoint\": 1, \"step\": 4";
  fs::create_directories(fs::path(dir) / "junk");
  // A manifest for another step in this step's folder.
  fs::create_directories(fs::path(dir) / CheckpointFolderName(50));
  std::ofstream(fs::path(dir) / CheckpointFolderName(50) /
                kCheckpointManifestName)
      << CheckpointManifestJson(TwoShards(51));
  auto steps = ListCheckpoints(dir);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, (std::vector<uint64_t>{10, 20}));
  EXPECT_EQ(ReadCheckpointManifest(dir, 30).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadCheckpointManifest(dir, 40).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_NE(ReadCheckpointManifest(dir, 50).status().message().find("51"),
            std::string::npos);
  EXPECT_EQ(WriteCheckpointManifest(dir, TwoShards(60)).code(),
            absl::StatusCode::kFailedPrecondition);  // no folder

  // Keep the newest complete one: 10 and 15 go; 30, 40, 50 (newer than
  // the newest complete, maybe being written) and "junk" stay.
  ASSERT_TRUE(PruneCheckpoints(dir, 1).ok());
  EXPECT_FALSE(fs::exists(fs::path(dir) / CheckpointFolderName(10)));
  EXPECT_FALSE(fs::exists(fs::path(dir) / CheckpointFolderName(15)));
  for (uint64_t step : {20, 30, 40, 50}) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / CheckpointFolderName(step))) << step;
  }
  EXPECT_TRUE(fs::exists(fs::path(dir) / "junk"));
  EXPECT_EQ(PruneCheckpoints(dir, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ListCheckpoints(dir + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace zeroshard
