// Pre-tokenized data: llm.c `.bin` shards and bare uint16 arrays (nanoGPT)
// written here byte by byte, their errors (each naming the file), the
// dataset's globs and splits, the sampler over several files, and the
// zeroshard.data config keys.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "data/batch_sampler.h"
#include "data/dataset.h"
#include "data/token_file.h"

namespace zeroshard {
namespace {

namespace fs = std::filesystem;

class TokenDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("zs_token_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Raw bytes, as a foreign writer would leave them.
  std::string WriteRaw(const std::string& name, const std::string& bytes) const {
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }

  fs::path dir_;
};

std::vector<uint16_t> Iota(size_t n, uint16_t base) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(base + i);
  return v;
}

// llm.c's write_datafile: np.zeros(256, int32) with [0] magic, [1] version,
// [2] count, then the tokens as uint16, all little-endian.
std::string LlmcBytes(int32_t magic, int32_t version, int32_t count,
                      const std::vector<uint16_t>& tokens) {
  std::string s(1024, '\0');
  std::memcpy(&s[0], &magic, 4);
  std::memcpy(&s[4], &version, 4);
  std::memcpy(&s[8], &count, 4);
  s.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return s;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(TokenDataTest, LlmcShardMatchesLlmcsLayoutAndReadsBack) {
  const std::vector<uint16_t> toks = {0, 1, 511, 42, 7};
  ASSERT_TRUE(WriteLlmcFile(Path("a.bin"), toks).ok());
  // Byte for byte what llm.c's Python writer produces.
  EXPECT_EQ(ReadAll(Path("a.bin")), LlmcBytes(20240520, 1, 5, toks));
  for (DataFormat f : {DataFormat::kLlmc, DataFormat::kAuto}) {
    absl::StatusOr<TokenFile> t = TokenFile::Open(Path("a.bin"), f, 512);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->format(), DataFormat::kLlmc);
    EXPECT_EQ(std::vector<uint16_t>(t->tokens().begin(), t->tokens().end()), toks);
  }
}

TEST_F(TokenDataTest, Uint16ArrayReadsBackAndAutoDetectsIt) {
  const std::vector<uint16_t> toks = Iota(100, 3);
  ASSERT_TRUE(WriteUint16File(Path("train.bin"), toks).ok());
  EXPECT_EQ(fs::file_size(Path("train.bin")), 200u);  // np.uint16 .tofile: no header
  for (DataFormat f : {DataFormat::kUint16, DataFormat::kAuto}) {
    absl::StatusOr<TokenFile> t = TokenFile::Open(Path("train.bin"), f, 512);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->format(), DataFormat::kUint16);
    EXPECT_EQ(std::vector<uint16_t>(t->tokens().begin(), t->tokens().end()), toks);
  }
}

void ExpectDataLoss(const std::string& path, DataFormat f, int vocab,
                    const std::string& words) {
  absl::StatusOr<TokenFile> t = TokenFile::Open(path, f, vocab);
  ASSERT_FALSE(t.ok()) << path;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
  EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find(words), std::string::npos) << t.status();
}

TEST_F(TokenDataTest, CorruptFilesAreErrorsNamingTheFile) {
  const std::vector<uint16_t> toks = Iota(10, 0);
  ExpectDataLoss(WriteRaw("magic.bin", LlmcBytes(12345, 1, 10, toks)), DataFormat::kLlmc, 512,
                 "magic 12345");
  ExpectDataLoss(WriteRaw("version.bin", LlmcBytes(20240520, 7, 10, toks)), DataFormat::kAuto,
                 512, "version 7");
  ExpectDataLoss(WriteRaw("count.bin", LlmcBytes(20240520, 1, 11, toks)), DataFormat::kAuto, 512,
                 "says 11 tokens");
  ExpectDataLoss(WriteRaw("negative.bin", LlmcBytes(20240520, 1, -1, {})), DataFormat::kAuto, 512,
                 "token count -1");
  ExpectDataLoss(WriteRaw("short.bin", std::string(LlmcBytes(20240520, 1, 0, {}), 0, 100)),
                 DataFormat::kLlmc, 512, "header needs 1024 bytes");
  ExpectDataLoss(WriteRaw("llama3.bin", LlmcBytes(20240801, 2, 10, toks)), DataFormat::kAuto, 512,
                 "not supported");
  ExpectDataLoss(WriteRaw("odd.bin", std::string(7, 'x')), DataFormat::kUint16, 512,
                 "odd length 7");
  ExpectDataLoss(WriteRaw("empty.bin", ""), DataFormat::kAuto, 512, "empty");
  ExpectDataLoss(WriteRaw("none.bin", LlmcBytes(20240520, 1, 0, {})), DataFormat::kAuto, 512,
                 "no tokens");
  absl::StatusOr<TokenFile> missing =
      TokenFile::Open(Path("missing.bin"), DataFormat::kAuto, 512);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(Path("missing.bin")), std::string::npos);
}

TEST_F(TokenDataTest, OutOfVocabularyTokenNamesFileIndexAndOffset) {
  std::vector<uint16_t> toks = Iota(10, 0);
  toks[3] = 512;  // vocab 512: ids 0..511
  ASSERT_TRUE(WriteLlmcFile(Path("oov.bin"), toks).ok());
  ExpectDataLoss(Path("oov.bin"), DataFormat::kAuto, 512,
                 "token 512 at index 3 (byte offset 1030)");
  ASSERT_TRUE(WriteUint16File(Path("oov16.bin"), toks).ok());
  ExpectDataLoss(Path("oov16.bin"), DataFormat::kUint16, 512, "at index 3 (byte offset 6)");
  EXPECT_TRUE(TokenFile::Open(Path("oov.bin"), DataFormat::kAuto, 513).ok());
}

DataConfig TokenConfig(std::vector<std::string> train, std::vector<std::string> val,
                       DataFormat f = DataFormat::kAuto, double fraction = 0.05) {
  DataConfig d;
  d.paths = std::move(train);
  d.validation_paths = std::move(val);
  d.format = f;
  d.validation_fraction = fraction;
  return d;
}

TEST_F(TokenDataTest, DatasetExpandsGlobsSortedAndReadsValidationFiles) {
  ASSERT_TRUE(WriteLlmcFile(Path("shard_001.bin"), Iota(300, 1000)).ok());
  ASSERT_TRUE(WriteLlmcFile(Path("shard_000.bin"), Iota(200, 0)).ok());
  ASSERT_TRUE(WriteUint16File(Path("val.bin"), Iota(50, 5000)).ok());
  absl::StatusOr<Dataset> d =
      Dataset::Load(TokenConfig({Path("shard_*.bin")}, {Path("val.bin")}), 8000);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto& train = d->split(DataSplit::kTrain);
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[0].source, Path("shard_000.bin"));
  EXPECT_EQ(train[1].source, Path("shard_001.bin"));
  EXPECT_EQ(d->tokens(DataSplit::kTrain), 500u);
  EXPECT_EQ(d->tokens(DataSplit::kValidation), 50u);
  EXPECT_EQ(d->split(DataSplit::kValidation)[0].at(0), 5000);
  EXPECT_NE(d->Describe().find("validation 50 tokens (1 file)"), std::string::npos)
      << d->Describe();

  absl::StatusOr<Dataset> none = Dataset::Load(TokenConfig({Path("nope_*.bin")}, {}), 8000);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("nope_*.bin"), std::string::npos) << none.status();
  EXPECT_NE(none.status().message().find("zeroshard.data.train"), std::string::npos);
  // One bad file among good ones: the error names it.
  ASSERT_TRUE(WriteUint16File(Path("shard_002.bin"), {1, 2, 9000}).ok());
  absl::StatusOr<Dataset> bad = Dataset::Load(TokenConfig({Path("shard_*.bin")}, {}), 8000);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("shard_002.bin"), std::string::npos) << bad.status();
}

TEST_F(TokenDataTest, WithoutValidationFilesTheTailIsHeldOut) {
  ASSERT_TRUE(WriteUint16File(Path("a.bin"), Iota(100, 0)).ok());
  ASSERT_TRUE(WriteUint16File(Path("b.bin"), Iota(100, 100)).ok());
  // 10% of 200 = the last 20 tokens, 180..199.
  absl::StatusOr<Dataset> d = Dataset::Load(
      TokenConfig({Path("a.bin"), Path("b.bin")}, {}, DataFormat::kUint16, 0.1), 512);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->tokens(DataSplit::kTrain), 180u);
  ASSERT_EQ(d->split(DataSplit::kValidation).size(), 1u);
  EXPECT_EQ(d->split(DataSplit::kValidation)[0].size, 20u);
  EXPECT_EQ(d->split(DataSplit::kValidation)[0].at(0), 180);
  // 60% would cross into a.bin: both segments' tails.
  absl::StatusOr<Dataset> wide = Dataset::Load(
      TokenConfig({Path("a.bin"), Path("b.bin")}, {}, DataFormat::kUint16, 0.5), 512);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->tokens(DataSplit::kTrain), 100u);
  EXPECT_EQ(wide->split(DataSplit::kValidation)[0].at(0), 100);
}

TEST_F(TokenDataTest, SamplerWindowsStayInsideOneFile) {
  // Each file counts up from its own base, so a window is valid iff its
  // tokens are consecutive; one crossing a boundary would jump.
  ASSERT_TRUE(WriteLlmcFile(Path("s0.bin"), Iota(40, 0)).ok());
  ASSERT_TRUE(WriteLlmcFile(Path("s1.bin"), Iota(5, 100)).ok());  // too short: skipped
  ASSERT_TRUE(WriteLlmcFile(Path("s2.bin"), Iota(30, 200)).ok());
  absl::StatusOr<Dataset> d = Dataset::Load(
      TokenConfig({Path("s0.bin"), Path("s1.bin"), Path("s2.bin")}, {Path("s0.bin")}), 512);
  ASSERT_TRUE(d.ok()) << d.status();
  const int T = 8;
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(*d, DataSplit::kTrain, T, 7);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_offsets(), (40u - T) + (30u - T));
  bool saw[2] = {false, false};
  for (uint64_t g = 0; g < 2000; ++g) {
    std::vector<int32_t> in(T), tg(T);
    ASSERT_TRUE(s->FillSample(3, g, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
    for (int t = 0; t < T; ++t) {
      ASSERT_EQ(tg[t], in[t] + 1) << "g=" << g;
      if (t > 0) {
        ASSERT_EQ(in[t], in[t - 1] + 1) << "g=" << g;
      }
    }
    saw[in[0] >= 200] = true;
    EXPECT_TRUE(in[0] < 100 || in[0] >= 200);
  }
  EXPECT_TRUE(saw[0] && saw[1]);
  // Too short for any window: the error says so.
  absl::StatusOr<BatchSampler> big = BatchSampler::Create(*d, DataSplit::kTrain, 64, 7);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("fewer than context + 1 = 65"), std::string::npos)
      << big.status();
}

TEST_F(TokenDataTest, ByteCorpusAsADatasetSamplesAsBefore) {
  DataConfig text;
  std::ofstream(Path("t.txt")) << std::string(500, 'a') + "xyz";
  text.paths = {Path("t.txt")};
  absl::StatusOr<Dataset> d = Dataset::Load(text, 256);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<Corpus> c = Corpus::Load(text);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<BatchSampler> a = BatchSampler::Create(*d, DataSplit::kTrain, 16, 1);
  absl::StatusOr<BatchSampler> b = BatchSampler::Create(*c, DataSplit::kTrain, 16, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->num_offsets(), c->train_size() - 16);
  for (uint64_t g = 0; g < 50; ++g) EXPECT_EQ(a->Offset(5, g), b->Offset(5, g));
  EXPECT_EQ(d->tokens(DataSplit::kValidation), c->size() - c->train_size());
}

TEST(DataConfigTest, EvalCadenceDefaultsToAboutTenPerRunOnPrintedSteps) {
  struct Case {
    int steps, print;
    const char* every;  // JSON value of eval_every_steps, or nullptr (absent)
    uint64_t want;
  };
  const Case cases[] = {
      {300, 10, nullptr, 30}, {300, 10, "\"auto\"", 30}, {20, 10, nullptr, 10},
      {8, 4, nullptr, 4},     {1000, 10, nullptr, 100}, {1000, 7, nullptr, 98},
      {1, 1, nullptr, 1},     {300, 10, "7", 7},        {300, 10, "0", 0}};
  for (const Case& k : cases) {
    const std::string every =
        k.every == nullptr ? "" : absl::StrCat(R"(, "eval_every_steps": )", k.every);
    absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(absl::StrCat(
        R"({"train_batch_size": 2, "steps_per_print": )", k.print,
        R"(, "zeroshard": {"steps": )", k.steps, R"(, "data": {"eval_batches": 1)", every,
        "}}}"));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->config.cluster.data.eval_every_steps, k.want)
        << "steps " << k.steps << ", steps_per_print " << k.print << every;
  }
  // A --steps override moves the default with it.
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(
      R"({"train_batch_size": 2, "zeroshard": {"steps": 300}})", {.steps = 1000});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.cluster.data.eval_every_steps, 100u);
}

TEST(DataConfigTest, TokenKeysParseAndDefault) {
  absl::StatusOr<ParsedConfig> p = ParseTrainingConfig(R"({
    "train_batch_size": 2, "steps_per_print": 5,
    "zeroshard": {"model": {"layers": 1, "heads": 2, "width": 32, "vocab": 512, "context": 16},
                  "data": {"train": "/data/shard_*.bin", "validation": ["/data/val.bin"],
                           "eval_batches": 2}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  const DataConfig& d = p->config.cluster.data;
  EXPECT_EQ(d.format, DataFormat::kAuto);  // "train" without a format
  EXPECT_EQ(d.paths, std::vector<std::string>{"/data/shard_*.bin"});
  EXPECT_EQ(d.validation_paths, std::vector<std::string>{"/data/val.bin"});
  // About ten evaluations in the default 100 steps, on printed steps.
  EXPECT_EQ(d.eval_every_steps, 10u);
  EXPECT_EQ(d.eval_batches, 2);
  EXPECT_TRUE(p->warnings.empty());

  // Text "paths" without a format stay bytes; vocab < 256 is then refused.
  p = ParseTrainingConfig(R"({"train_batch_size": 2,
    "zeroshard": {"model": {"layers": 1, "heads": 2, "width": 32, "vocab": 200, "context": 16},
                  "data": {"paths": ["a.txt"]}}})");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("zeroshard.model.vocab"), std::string::npos);

  p = ParseTrainingConfig(R"({"train_batch_size": 2,
    "zeroshard": {"data": {"format": "llmc"}}})");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("zeroshard.data.train"), std::string::npos) << p.status();
  p = ParseTrainingConfig(R"({"train_batch_size": 2,
    "zeroshard": {"data": {"train": "a.bin", "format": "int32"}}})");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("zeroshard.data.format"), std::string::npos);
  p = ParseTrainingConfig(R"({"train_batch_size": 2,
    "zeroshard": {"data": {"train": "a.bin", "paths": ["b.txt"]}}})");
  ASSERT_FALSE(p.ok());
  p = ParseTrainingConfig(R"({"train_batch_size": 2,
    "zeroshard": {"data": {"train": "a.bin", "eval_every_steps": 0}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->config.cluster.data.eval_every_steps, 0u);
  // The new keys change what is trained: they are in the fingerprint.
  TrainingConfig other = p->config;
  other.cluster.data.format = DataFormat::kUint16;
  EXPECT_NE(ConfigFingerprint(other), ConfigFingerprint(p->config));
}

}  // namespace
}  // namespace zeroshard
