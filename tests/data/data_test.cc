// The corpus and the batch sampler: the built-in corpus, splits, purity,
// coverage equivalence across (workers, accumulation, micro-batch)
// factorizations, bounds, and argument errors.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "data/batch_sampler.h"
#include "data/corpus.h"

namespace zeroshard {
namespace {

std::string RandomText(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);  // all 256 byte values
  return s;
}

Corpus MustCorpus(absl::StatusOr<Corpus> c) {
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

BatchSampler MustSampler(const Corpus& c, int t, uint64_t seed,
                         DataSplit split = DataSplit::kTrain) {
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(c, split, t, seed);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(CorpusTest, BuiltInIsTheSortedLicenseTexts) {
  if (!std::filesystem::is_directory(kBuiltInCorpusDir)) GTEST_SKIP() << "no base-files";
  absl::StatusOr<Corpus> c = Corpus::BuiltIn(0.05);
  ASSERT_TRUE(c.ok()) << c.status();
  uint64_t expected = 0;
  std::vector<std::string> regular;
  for (const auto& e : std::filesystem::directory_iterator(kBuiltInCorpusDir)) {
    if (e.is_symlink() || !e.is_regular_file()) continue;
    regular.push_back(e.path().string());
    expected += e.file_size() + 1;
  }
  std::sort(regular.begin(), regular.end());
  EXPECT_EQ(c->sources(), regular);
  EXPECT_EQ(c->size(), expected);
  EXPECT_EQ(c->train_size(), expected - static_cast<uint64_t>(expected * 0.05));
  // Deterministic: loading twice gives the same bytes.
  EXPECT_EQ(Corpus::BuiltIn(0.05)->fingerprint(), c->fingerprint());
}

TEST(CorpusTest, EmptyDirectoryAndMissingFilesAreClearErrors) {
  const std::string dir = ::testing::TempDir() + "/zs_empty_corpus_dir";
  std::filesystem::create_directories(dir);
  absl::StatusOr<Corpus> c = Corpus::BuiltIn(0.1, dir);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("zeroshard.data.paths"), std::string::npos);
  c = Corpus::FromFiles({"/nonexistent/text.txt"}, 0.1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/text.txt"), std::string::npos);
  EXPECT_FALSE(Corpus::FromBytes("abc", 1.0).ok());
  EXPECT_FALSE(Corpus::FromBytes("", 0.1).ok());
}

TEST(CorpusTest, FilesConcatenateInOrderAndSplitAtTheEnd) {
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/zs_corpus_a.txt", b = dir + "/zs_corpus_b.txt";
  std::ofstream(a) << "hello";
  std::ofstream(b) << "world!";
  DataConfig d;
  d.paths = {b, a};
  d.validation_fraction = 0.25;
  Corpus c = MustCorpus(Corpus::Load(d));
  const std::string all = "world!\nhello\n";
  ASSERT_EQ(c.size(), all.size());
  const uint64_t val = static_cast<uint64_t>(all.size() * 0.25);
  auto train = c.split(DataSplit::kTrain), valid = c.split(DataSplit::kValidation);
  EXPECT_EQ(std::string(train.begin(), train.end()), all.substr(0, all.size() - val));
  EXPECT_EQ(std::string(valid.begin(), valid.end()), all.substr(all.size() - val));
}

TEST(BatchSamplerTest, PureFunctionOfSeedStepAndIndex) {
  Corpus c = MustCorpus(Corpus::FromBytes(RandomText(5000, 1), 0.1));
  BatchSampler s1 = MustSampler(c, 32, 77), s2 = MustSampler(c, 32, 77);
  BatchSampler other_seed = MustSampler(c, 32, 78);
  for (uint64_t step : {0, 1, 999}) {
    auto a = s1.MicroBatch(step, 1, 2, 1, 4), b = s2.MicroBatch(step, 1, 2, 1, 4);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->inputs, b->inputs);
    EXPECT_EQ(a->targets, b->targets);
    // Repeated calls on one sampler agree too.
    EXPECT_EQ(s1.MicroBatch(step, 1, 2, 1, 4)->inputs, a->inputs);
  }
  int differ_seed = 0, differ_step = 0;
  for (uint64_t g = 0; g < 64; ++g) {
    differ_seed += s1.Offset(3, g) != other_seed.Offset(3, g);
    differ_step += s1.Offset(3, g) != s1.Offset(4, g);
  }
  EXPECT_GT(differ_seed, 55);
  EXPECT_GT(differ_step, 55);
}

// The rows a whole step trains on, ordered by global sample index.
std::vector<std::vector<int32_t>> StepRows(const BatchSampler& s, uint64_t step, int workers,
                                           int gas, int b) {
  std::map<uint64_t, std::vector<int32_t>> rows;
  const int t = s.context();
  for (int m = 0; m < gas; ++m) {
    for (int r = 0; r < workers; ++r) {
      absl::StatusOr<TokenBatch> mb = s.MicroBatch(step, r, workers, m, b);
      EXPECT_TRUE(mb.ok()) << mb.status();
      for (int i = 0; i < b; ++i) {
        const uint64_t g = BatchSampler::GlobalSampleIndex(r, workers, m, b, i);
        EXPECT_EQ(rows.count(g), 0u) << "sample " << g << " drawn twice";
        rows[g] = std::vector<int32_t>(mb->inputs.begin() + i * t, mb->inputs.begin() + (i + 1) * t);
      }
    }
  }
  std::vector<std::vector<int32_t>> out;
  uint64_t expect_g = 0;
  for (auto& [g, row] : rows) {
    EXPECT_EQ(g, expect_g++);  // exactly [0, train_batch_size)
    out.push_back(std::move(row));
  }
  return out;
}

TEST(BatchSamplerTest, SameSamplesForEveryFactorizationOfTheBatch) {
  Corpus c = MustCorpus(Corpus::FromBytes(RandomText(20000, 2), 0.0));
  BatchSampler s = MustSampler(c, 16, 5);
  struct F { int workers, gas, b; };
  for (uint64_t step : {0, 7}) {
    const auto ref = StepRows(s, step, 1, 1, 8);
    ASSERT_EQ(ref.size(), 8u);
    for (F f : {F{2, 2, 2}, F{1, 4, 2}, F{4, 1, 2}, F{2, 1, 4}, F{1, 8, 1}, F{8, 1, 1}}) {
      EXPECT_EQ(StepRows(s, step, f.workers, f.gas, f.b), ref)
          << f.workers << " workers x " << f.gas << " micro-steps x " << f.b;
    }
  }
}

TEST(BatchSamplerTest, WindowsStayInBoundsAndTargetsAreShifted) {
  const std::string text = RandomText(3000, 3);
  Corpus c = MustCorpus(Corpus::FromBytes(text, 0.2));
  for (DataSplit split : {DataSplit::kTrain, DataSplit::kValidation}) {
    BatchSampler s = MustSampler(c, 64, 11, split);
    const auto part = c.split(split);
    EXPECT_EQ(s.num_offsets(), part.size() - 64);
    std::vector<int32_t> in(64), tg(64);
    for (uint64_t g = 0; g < 500; ++g) {
      const uint64_t off = s.Offset(g % 13, g);
      ASSERT_LT(off, s.num_offsets());
      ASSERT_TRUE(s.FillSample(g % 13, g, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
      for (int t = 0; t < 64; ++t) {
        ASSERT_GE(in[t], 0);
        ASSERT_LT(in[t], 256);
        ASSERT_EQ(in[t], part[off + t]);
        ASSERT_EQ(tg[t], part[off + t + 1]);
      }
    }
  }
}

TEST(BatchSamplerTest, OffsetsCoverTheWholeRange) {
  Corpus c = MustCorpus(Corpus::FromBytes(RandomText(20, 4), 0.0));
  BatchSampler s = MustSampler(c, 10, 1);  // 10 possible offsets
  ASSERT_EQ(s.num_offsets(), 10u);
  std::vector<int> hist(10, 0);
  for (uint64_t g = 0; g < 10000; ++g) ++hist[s.Offset(g / 100, g)];
  for (int h : hist) EXPECT_GT(h, 800);  // ~1000 each
  // Exactly context + 1 bytes: a single window.
  Corpus tight = MustCorpus(Corpus::FromBytes(RandomText(11, 5), 0.0));
  BatchSampler one = MustSampler(tight, 10, 1);
  for (uint64_t g = 0; g < 50; ++g) EXPECT_EQ(one.Offset(g, g), 0u);
}

TEST(BatchSamplerTest, BadArgumentsAreErrors) {
  Corpus c = MustCorpus(Corpus::FromBytes(RandomText(100, 6), 0.0));
  absl::StatusOr<BatchSampler> s = BatchSampler::Create(c, DataSplit::kTrain, 100, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("context + 1"), std::string::npos);
  s = BatchSampler::Create(c, DataSplit::kValidation, 8, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("validation"), std::string::npos);
  EXPECT_FALSE(BatchSampler::Create(c, DataSplit::kTrain, 0, 1).ok());
  BatchSampler ok = MustSampler(c, 8, 1);
  std::vector<int32_t> in(16), tg(16);
  EXPECT_FALSE(ok.FillMicroBatch(0, 2, 2, 0, 2, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_FALSE(ok.FillMicroBatch(0, -1, 2, 0, 2, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_FALSE(ok.FillMicroBatch(0, 0, 2, -1, 2, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_FALSE(ok.FillMicroBatch(0, 0, 2, 0, 3, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_TRUE(ok.FillMicroBatch(0, 1, 2, 3, 2, absl::MakeSpan(in), absl::MakeSpan(tg)).ok());
  EXPECT_FALSE(ok.MicroBatch(0, 0, 1, 0, 0).ok());
}

TEST(BatchSamplerTest, SamplerOutlivesTheCorpusObject) {
  absl::StatusOr<BatchSampler> s;
  std::vector<int32_t> before;
  {
    Corpus c = MustCorpus(Corpus::FromBytes(RandomText(500, 8), 0.0));
    s = BatchSampler::Create(c, DataSplit::kTrain, 16, 3);
    ASSERT_TRUE(s.ok());
    before = s->MicroBatch(2, 0, 1, 0, 3)->inputs;
  }
  EXPECT_EQ(s->MicroBatch(2, 0, 1, 0, 3)->inputs, before);
}

}  // namespace
}  // namespace zeroshard
