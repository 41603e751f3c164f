// Generation (model/generate.h) on the small GPT-2 of
// tests/fixtures/gpt_golden.bin against tests/fixtures/generate_golden.json
// (PyTorch 1.13, float64; tests/fixtures/make_generate_golden.py):
//   * the next-token logits of a prompt: |l - golden| <= 1e-4 * max |golden|
//     (FP32 against float64);
//   * greedy generation equals the argmax of those logits, and a 10-token
//     greedy continuation that crops the context equals torch's exactly
//     (the fixture's smallest top-2 logit gap is far above FP32 error);
//   * sampling with a seed is deterministic; bad inputs are clear errors.
#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace zeroshard::model {
namespace {

struct GoldenWeights {
  GptShape shape;
  std::vector<float> params;  // manifest order, unpadded
};

// The weights of gpt_golden.bin (layout: make_gpt_golden.py's docstring).
bool ReadWeights(GoldenWeights* g) {
  std::ifstream in("tests/fixtures/gpt_golden.bin", std::ios::binary);
  if (!in) return false;
  std::vector<char> b((std::istreambuf_iterator<char>(in)), {});
  char magic[8];
  int32_t dims[7];
  int64_t n = 0;
  if (b.size() < 8 + sizeof(dims) + 8) return false;
  std::memcpy(magic, b.data(), 8);
  std::memcpy(dims, b.data() + 8, sizeof(dims));
  std::memcpy(&n, b.data() + 8 + sizeof(dims), 8);
  if (std::memcmp(magic, "ZSGPTGLD", 8) != 0) return false;
  g->shape = {dims[0], dims[1], dims[2], dims[3], dims[4]};
  const size_t bt = static_cast<size_t>(dims[5]) * dims[6];
  const size_t at = 8 + sizeof(dims) + 8 + 2 * bt * 4 + 8;  // tokens, targets, loss
  if (b.size() != at + 2 * n * 4) return false;
  g->params.resize(n);
  std::memcpy(g->params.data(), b.data() + at, n * 4);
  return true;
}

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GoldenWeights w;
    ASSERT_TRUE(ReadWeights(&w)) << "cannot read tests/fixtures/gpt_golden.bin";
    shape_ = w.shape;
    std::ifstream in("tests/fixtures/generate_golden.json");
    ASSERT_TRUE(in) << "cannot read tests/fixtures/generate_golden.json";
    golden_ = nlohmann::json::parse(in);
    // Two partitions: units carry padding, which the generator must skip.
    auto manifest = MakeGptManifest(shape_, 2);
    ASSERT_TRUE(manifest.ok());
    auto layout = FlatLayout::Create(*manifest, 1, 2);
    ASSERT_TRUE(layout.ok());
    layout_.emplace(*layout);
    ASSERT_EQ(layout_->param_elems(), w.params.size());
    flat_.assign(layout_->total_elems(), 0.0f);
    size_t at = 0;
    for (const TensorInfo& t : layout_->tensors()) {
      std::copy_n(w.params.begin() + at, t.numel, flat_.begin() + t.offset);
      at += t.numel;
    }
    auto gen = GptGenerator::Create(*layout_, shape_, flat_);
    ASSERT_TRUE(gen.ok()) << gen.status();
    gen_.emplace(*std::move(gen));
  }

  std::vector<int32_t> Ints(const char* key) const {
    return golden_.at(key).get<std::vector<int32_t>>();
  }

  GptShape shape_;
  nlohmann::json golden_;
  std::optional<FlatLayout> layout_;
  std::vector<float> flat_;
  std::optional<GptGenerator> gen_;
};

TEST_F(GenerateTest, NextTokenLogitsMatchTorch) {
  const std::vector<float> want = golden_.at("logits").get<std::vector<float>>();
  ASSERT_EQ(want.size(), static_cast<size_t>(shape_.vocab));
  auto got = gen_->NextTokenLogits(Ints("prompt"));
  ASSERT_TRUE(got.ok()) << got.status();
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR((*got)[i], want[i], 1e-4 * scale) << "logit " << i;
  }
}

TEST_F(GenerateTest, GreedyIsTheArgmaxOfTheLogits) {
  const std::vector<int32_t> prompt = Ints("prompt");
  auto logits = gen_->NextTokenLogits(prompt);
  ASSERT_TRUE(logits.ok());
  const int32_t argmax = static_cast<int32_t>(
      std::max_element(logits->begin(), logits->end()) - logits->begin());
  const std::vector<float> want = golden_.at("logits").get<std::vector<float>>();
  EXPECT_EQ(argmax, std::max_element(want.begin(), want.end()) - want.begin());
  GenerateOptions greedy{.max_new_tokens = 1, .temperature = 0, .top_k = 0};
  auto one = gen_->Generate(prompt, greedy);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<int32_t>{argmax});
}

TEST_F(GenerateTest, GreedyContinuationCropsTheContextAsTorch) {
  const std::vector<int32_t> prompt = Ints("crop_prompt");
  const int n = golden_.at("max_new_tokens").get<int>();
  ASSERT_GT(prompt.size() + n, static_cast<size_t>(shape_.context));
  ASSERT_GT(golden_.at("min_margin").get<double>(), 1e-3);
  GenerateOptions greedy{.max_new_tokens = n, .temperature = 0, .top_k = 0};
  auto out = gen_->Generate(prompt, greedy);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Ints("greedy"));
  // A prompt longer than the context is cropped too.
  std::vector<int32_t> longer(40, 3);
  longer.insert(longer.end(), prompt.begin(), prompt.end());
  auto same_tail = gen_->Generate(longer, {.max_new_tokens = 1, .temperature = 0});
  auto tail = gen_->Generate(absl::MakeConstSpan(longer).last(shape_.context),
                             {.max_new_tokens = 1, .temperature = 0});
  ASSERT_TRUE(same_tail.ok() && tail.ok());
  EXPECT_EQ(*same_tail, *tail);
}

TEST_F(GenerateTest, SamplingIsDeterministicForASeed) {
  const std::vector<int32_t> prompt = Ints("prompt");
  GenerateOptions o{.max_new_tokens = 24, .temperature = 1.0, .top_k = 0, .seed = 7};
  auto a = gen_->Generate(prompt, o);
  auto b = gen_->Generate(prompt, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->size(), 24u);
  o.seed = 8;
  auto c = gen_->Generate(prompt, o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c) << "24 tokens drawn from 64 alike under two seeds";
  // top_k = 1 is greedy whatever the temperature and seed.
  auto k1 = gen_->Generate(prompt, {.max_new_tokens = 5, .temperature = 2.0, .top_k = 1});
  auto greedy = gen_->Generate(prompt, {.max_new_tokens = 5, .temperature = 0});
  ASSERT_TRUE(k1.ok() && greedy.ok());
  EXPECT_EQ(*k1, *greedy);
}

TEST(PickTokenTest, SamplesFromTheTemperedTopK) {
  // softmax([0, ln 3]) = [1/4, 3/4] at temperature 1.
  const std::vector<float> logits = {0.0f, std::log(3.0f), -100.0f};
  GenerateOptions o{.temperature = 1.0, .top_k = 0};
  EXPECT_EQ(PickToken(logits, o, 0.0), 1);   // the likelier one comes first
  EXPECT_EQ(PickToken(logits, o, 0.74), 1);
  EXPECT_EQ(PickToken(logits, o, 0.76), 0);
  EXPECT_EQ(PickToken(logits, o, 0.999999), 0);
  o.top_k = 1;
  EXPECT_EQ(PickToken(logits, o, 0.99), 1);
  o.temperature = 0;
  EXPECT_EQ(PickToken(logits, o, 0.5), 1);
  // A tie goes to the lower id, greedy or not.
  const std::vector<float> tie = {1.0f, 2.0f, 2.0f};
  EXPECT_EQ(PickToken(tie, o, 0.0), 1);
  EXPECT_EQ(PickToken(tie, {.temperature = 1.0, .top_k = 1}, 0.9), 1);
}

TEST_F(GenerateTest, BadInputsAreClearErrors) {
  auto msg = [](const absl::Status& s) { return std::string(s.message()); };
  auto empty = gen_->Generate({}, {});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(msg(empty.status()).find("prompt is empty"), std::string::npos);
  const std::vector<int32_t> big = {1, shape_.vocab};
  auto oov = gen_->Generate(big, {});
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(msg(oov.status()).find("prompt token[1] = 64 is outside the vocabulary [0, 64)"),
            std::string::npos) << oov.status();
  EXPECT_NE(msg(gen_->Generate(Ints("prompt"), {.max_new_tokens = -1}).status())
                .find("max_new_tokens"), std::string::npos);
  EXPECT_NE(msg(gen_->Generate(Ints("prompt"), {.temperature = -1}).status())
                .find("temperature"), std::string::npos);
  EXPECT_NE(msg(gen_->Generate(Ints("prompt"), {.temperature = NAN}).status())
                .find("temperature"), std::string::npos);
  EXPECT_NE(msg(gen_->Generate(Ints("prompt"), {.top_k = -2}).status()).find("top_k"),
            std::string::npos);
  auto zero = gen_->Generate(Ints("prompt"), {.max_new_tokens = 0});
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->empty());
  std::vector<float> short_flat(flat_.begin(), flat_.end() - 1);
  auto bad = GptGenerator::Create(*layout_, shape_, short_flat);
  EXPECT_NE(msg(bad.status()).find("flat space"), std::string::npos) << bad.status();
  GptShape other = shape_;
  other.width *= 2;
  EXPECT_FALSE(GptGenerator::Create(*layout_, other, flat_).ok());
}

}  // namespace
}  // namespace zeroshard::model
