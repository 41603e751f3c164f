// Training on pre-tokenized data through the real zeroshard-train: llm.c
// `.bin` shards and nanoGPT-style uint16 arrays written here, a tiny GPT
// with vocabulary 512, 2 workers; the validation loss is in the metrics
// file (at the cadence and at the end), the summary and the plot, and starts
// near ln(512). A shard with a token outside the vocabulary stops the run
// with an error naming the file.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/train_harness.h"
#include "data/token_file.h"

namespace zeroshard::testing {
namespace {

constexpr int kVocab = 512;
const absl::Duration kRunTimeout = absl::Seconds(240);

// A learnable stream: a few hundred short "words" of tokens, picked at
// random, so bigram statistics are far from uniform.
std::vector<uint16_t> Tokens(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint16_t>> words(300);
  std::mt19937 wrng(1);  // the same words in every file
  for (auto& w : words) {
    w.resize(2 + wrng() % 5);
    for (uint16_t& t : w) t = static_cast<uint16_t>(wrng() % kVocab);
  }
  std::vector<uint16_t> out;
  while (out.size() < n) {
    const auto& w = words[rng() % words.size()];
    out.insert(out.end(), w.begin(), w.end());
  }
  out.resize(n);
  return out;
}

nlohmann::json TokenConfig() {
  nlohmann::json cfg = SmallConfig();
  cfg["steps_per_print"] = 4;
  cfg["optimizer"]["params"]["lr"] = 3e-3;
  cfg["zeroshard"]["workers"] = 2;
  cfg["zeroshard"]["steps"] = 8;
  cfg["zeroshard"]["model"] = {{"layers", 1}, {"heads", 2}, {"width", 64},
                               {"vocab", kVocab}, {"context", 32}};
  return cfg;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TokenDataRunTest, LlmcShardsTrainWithValidationLoss) {
  TrainDir dir("tokens_llmc");
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(WriteLlmcFile(dir.path("train_00000" + std::to_string(k) + ".bin"),
                              Tokens(20000, 10 + k))
                    .ok());
  }
  ASSERT_TRUE(WriteLlmcFile(dir.path("val_000000.bin"), Tokens(5000, 99)).ok());
  nlohmann::json cfg = TokenConfig();
  cfg["zeroshard"]["data"] = {{"train", dir.path("train_*.bin")},
                              {"validation", {dir.path("val_000000.bin")}},
                              {"format", "llmc"},
                              {"eval_batches", 2}};
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg), "--out=" + out},
                          kRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;

  auto rows = ReadMetricsCsv(out + "/metrics.csv");
  ASSERT_EQ(rows.size(), 8u);
  // steps_per_print 4: after steps 4 and 8 (rows 3 and 7), nowhere else.
  std::vector<double> val;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].count("val_loss"), 1u);
    if (i == 3 || i == 7) {
      ASSERT_FALSE(rows[i].at("val_loss").empty()) << "row " << i;
      val.push_back(std::stod(rows[i].at("val_loss")));
    } else {
      EXPECT_TRUE(rows[i].at("val_loss").empty()) << "row " << i;
    }
  }
  const double first_loss = std::stod(rows[0].at("loss"));
  const double ln_v = std::log(static_cast<double>(kVocab));
  EXPECT_NEAR(first_loss, ln_v, 0.3);  // ~ln(512) = 6.24 at init
  // Sane: finite, near ln(V) after a few steps, and falling with training.
  EXPECT_GT(val[0], ln_v - 1.5);
  EXPECT_LT(val[0], ln_v + 0.3);
  EXPECT_LT(val[1], val[0]) << "validation loss did not fall";
  EXPECT_NE(run.err.find("val loss"), std::string::npos) << run.err;
  EXPECT_NE(ReadText(out + "/loss.svg").find("validation loss"), std::string::npos);
  EXPECT_NE(ReadText(out + "/logs/worker0.log").find("format llmc"), std::string::npos);
}

TEST(TokenDataRunTest, Uint16ArrayWithHeldOutTailAndJsonlMetrics) {
  TrainDir dir("tokens_u16");
  ASSERT_TRUE(WriteUint16File(dir.path("train.bin"), Tokens(40000, 3)).ok());
  nlohmann::json cfg = TokenConfig();
  cfg["zeroshard"]["steps"] = 3;
  cfg["zeroshard"]["metrics"] = {{"path", "metrics.jsonl"}, {"format", "jsonl"}};
  cfg["zeroshard"]["data"] = {{"train", {dir.path("train.bin")}},
                              {"format", "uint16"},
                              {"validation_fraction", 0.1},
                              {"eval_every_steps", 0},
                              {"eval_batches", 1}};
  const std::string out = dir.path("out");
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg), "--out=" + out},
                          kRunTimeout);
  ASSERT_TRUE(run.status.success()) << run.status.ToString() << "\n" << run.err;
  std::istringstream lines(ReadText(out + "/metrics.jsonl"));
  std::vector<nlohmann::json> rows;
  for (std::string l; std::getline(lines, l);) rows.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0]["val_loss"].is_null());
  EXPECT_TRUE(rows[1]["val_loss"].is_null());
  ASSERT_TRUE(rows[2]["val_loss"].is_number());  // only at the end
  EXPECT_NEAR(rows[2]["val_loss"].get<double>(), std::log(512.0), 1.5);
}

TEST(TokenDataRunTest, OutOfVocabularyTokenStopsTheRunNamingTheFile) {
  TrainDir dir("tokens_oov");
  std::vector<uint16_t> toks = Tokens(5000, 4);
  toks[1234] = kVocab + 7;
  ASSERT_TRUE(WriteLlmcFile(dir.path("bad_shard.bin"), toks).ok());
  nlohmann::json cfg = TokenConfig();
  cfg["zeroshard"]["workers"] = 1;
  cfg["zeroshard"]["data"] = {{"train", dir.path("bad_shard.bin")}};
  TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                           "--out=" + dir.path("out")},
                          kRunTimeout);
  EXPECT_FALSE(run.status.success());
  const std::string logs = run.err + ReadText(dir.path("out") + "/logs/worker0.log");
  EXPECT_NE(logs.find("bad_shard.bin"), std::string::npos) << run.err;
  EXPECT_NE(logs.find("index 1234"), std::string::npos) << run.err;
}

// What the README promises to check before any process starts: a token
// file whose header is not llm.c's, and one shorter than the context, end
// the run with exit 2 naming the file and the key, and no server or worker
// has started (no logs).
TEST(TokenDataRunTest, BadTokenFilesAreRefusedBeforeAnyProcessStarts) {
  TrainDir dir("tokens_checked");
  std::vector<uint16_t> toks = Tokens(5000, 5);
  ASSERT_TRUE(WriteLlmcFile(dir.path("shard.bin"), toks).ok());
  std::string bytes = ReadText(dir.path("shard.bin"));
  bytes[0] ^= 0x5a;  // the magic number
  ASSERT_TRUE(dir.WriteText("bad_header.bin", bytes).size() > 0);
  ASSERT_TRUE(WriteLlmcFile(dir.path("short.bin"), Tokens(20, 6)).ok());
  const struct {
    const char* file;
    const char* want;
  } cases[] = {{"bad_header.bin", "bad_header.bin"},
               {"short.bin", "fewer than context + 1 = 33"}};
  for (const auto& c : cases) {
    nlohmann::json cfg = TokenConfig();
    cfg["zeroshard"]["workers"] = 1;
    cfg["zeroshard"]["data"] = {{"train", dir.path(c.file)},
                                {"format", "llmc"}};
    const std::string out = dir.path(absl::StrCat("out-", c.file));
    TrainRun run = RunTrain({"--config=" + dir.WriteConfig("c.json", cfg),
                             "--out=" + out},
                            kRunTimeout);
    EXPECT_TRUE(run.status.exited && run.status.code == 2) << run.err;
    EXPECT_NE(run.err.find(c.want), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("zeroshard.data"), std::string::npos) << run.err;
    EXPECT_FALSE(std::filesystem::exists(out + "/logs")) << c.file;
  }
}

}  // namespace
}  // namespace zeroshard::testing
