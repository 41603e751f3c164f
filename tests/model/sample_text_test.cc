// Prompts and output of a text sample (model/sample_text.h): the three
// kinds, ids prompts, and every bad input a clear error.
#include "model/sample_text.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "common/config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

using Ids = std::vector<int32_t>;

// Whether `text` contains `part` (printing both when not).
::testing::AssertionResult HasText(absl::string_view text, absl::string_view part) {
  if (text.find(part) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

TEST(SampleTextTest, ByteModelTakesBytes) {
  auto t = SampleText::Create(256, "", "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), SampleTextKind::kBytes);
  EXPECT_STREQ(t->kind_name(), "bytes");
  EXPECT_EQ(t->DefaultPrompt(), "The");
  EXPECT_EQ(*t->EncodePrompt("Hi\n"), (Ids{'H', 'i', '\n'}));
  EXPECT_EQ(*t->EncodePrompt("ids:1, 255"), (Ids{1, 255}));
  EXPECT_EQ(t->Render({'o', 'k', '\n', 0x01, 0xC3, 0xA9, 0xFF}),
            "ok\n\\x01\xC3\xA9\\xff");
}

TEST(SampleTextTest, SmallByteVocabularyChecksEachByte) {
  auto t = SampleText::Create(64, "", "");
  ASSERT_TRUE(t.ok());
  auto s = t->EncodePrompt("The");  // 'T' = 0x54 >= 64
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(HasText(s.status().message(), "prompt byte 0x54"));
  EXPECT_TRUE(HasText(s.status().message(), "vocab_size 64"));
}

TEST(SampleTextTest, LargerVocabularyWithoutFilesTakesIds) {
  auto t = SampleText::Create(50257, "", "");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->kind(), SampleTextKind::kIds);
  EXPECT_EQ(t->DefaultPrompt(), "ids:0");
  EXPECT_EQ(*t->EncodePrompt("ids:15496,995"), (Ids{15496, 995}));
  EXPECT_EQ(t->Render({15496, 995}), "15496,995");
  auto text = t->EncodePrompt("Hello");
  ASSERT_FALSE(text.ok());
  EXPECT_TRUE(HasText(text.status().message(), "needs a GPT-2 vocabulary"));
  EXPECT_TRUE(HasText(text.status().message(), "ids:"));
}

TEST(SampleTextTest, BadPromptsAreClearErrors) {
  auto t = SampleText::Create(256, "", "");
  ASSERT_TRUE(t.ok());
  auto empty = t->EncodePrompt("");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(empty.status().message(), "prompt is empty"));
  EXPECT_TRUE(HasText(t->EncodePrompt("ids:").status().message(), "no token ids"));
  EXPECT_TRUE(HasText(t->EncodePrompt("ids: ").status().message(), "no token ids"));
  EXPECT_TRUE(HasText(t->EncodePrompt("ids:1,x").status().message(), "\"x\" is not a token id"));
  EXPECT_TRUE(HasText(t->EncodePrompt("ids:1,,2").status().message(), "is not a token id"));
  EXPECT_TRUE(HasText(t->EncodePrompt("ids:-3").status().message(), "\"-3\""));
  auto big = t->EncodePrompt("ids:256");
  EXPECT_TRUE(HasText(big.status().message(),
                      "prompt token 256 is not below the model's vocab_size 256"));
}

class SampleTextFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sample_text_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    nlohmann::json v = nlohmann::json::object();
    const auto& map = Gpt2ByteToUnicode();
    for (int b = 0; b < 256; ++b) v[map[b]] = b;
    v["he"] = 256;
    vocab_ = (dir_ / "vocab.json").string();
    merges_ = (dir_ / "merges.txt").string();
    std::ofstream(vocab_) << v.dump();
    std::ofstream(merges_) << "#version: 0.2\nh e\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string vocab_, merges_;
};

TEST_F(SampleTextFilesTest, Gpt2VocabularyEncodesAndDecodesText) {
  auto t = SampleText::Create(300, vocab_, merges_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), SampleTextKind::kGpt2);
  EXPECT_EQ(*t->EncodePrompt("the"), (Ids{'t', 256}));
  EXPECT_EQ(*t->EncodePrompt("ids:7"), (Ids{7}));
  // Ids past the tokenizer (a padded model vocabulary) are shown as such.
  EXPECT_EQ(t->Render({'t', 256, 299, '!'}), "the<|299|>!");
}

TEST_F(SampleTextFilesTest, FileErrorsNameTheFile) {
  auto missing = SampleText::Create(300, (dir_ / "none.json").string(), merges_);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(HasText(missing.status().message(), "none.json"));
  auto one = SampleText::Create(300, vocab_, "");
  EXPECT_EQ(one.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(one.status().message(), "needs both files"));
  auto small = SampleText::Create(256, vocab_, merges_);  // id 256 >= 256
  EXPECT_TRUE(HasText(small.status().message(), "token ids up to 256"));
  EXPECT_TRUE(HasText(small.status().message(), "vocab_size is 256"));
}

// zeroshard.sample in a config file (common/config.h, SampleConfig).
TEST(SampleConfigTest, ParsesAndChecksTheSection) {
  auto defaults = ParseTrainingConfig(R"({"train_batch_size": 8})");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  const SampleConfig& d = defaults->config.cluster.sample;
  EXPECT_TRUE(d.enabled);
  EXPECT_EQ(d.prompt, "");
  EXPECT_EQ(d.max_new_tokens, 48);
  EXPECT_EQ(d.temperature, 0.8);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_EQ(d.seed, 1u);
  auto p = ParseTrainingConfig(R"({"train_batch_size": 8, "zeroshard": {"sample": {
      "enabled": false, "prompt": "ids:1,2", "max_new_tokens": 5, "temperature": 0,
      "top_k": 0, "seed": 9, "vocab": "v.json", "merges": "m.txt"}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->warnings.empty());
  const SampleConfig& c = p->config.cluster.sample;
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.prompt, "ids:1,2");
  EXPECT_EQ(c.max_new_tokens, 5);
  EXPECT_EQ(c.temperature, 0);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.vocab, "v.json");
  EXPECT_EQ(c.merges, "m.txt");
  auto one = ParseTrainingConfig(
      R"({"train_batch_size": 8, "zeroshard": {"sample": {"vocab": "v.json"}}})");
  EXPECT_TRUE(HasText(one.status().message(), "zeroshard.sample.merges"));
  auto neg = ParseTrainingConfig(
      R"({"train_batch_size": 8, "zeroshard": {"sample": {"max_new_tokens": -1}}})");
  EXPECT_TRUE(HasText(neg.status().message(), "zeroshard.sample.max_new_tokens"));
  auto temp = ParseTrainingConfig(
      R"({"train_batch_size": 8, "zeroshard": {"sample": {"temperature": "hot"}}})");
  EXPECT_TRUE(HasText(temp.status().message(), "zeroshard.sample.temperature"));
}

TEST(EscapeForTerminalTest, KeepsPrintableUtf8AndEscapesTheRest) {
  EXPECT_EQ(EscapeForTerminal("a\tb\nc"), "a\tb\nc");
  EXPECT_EQ(EscapeForTerminal("\x1b[31m"), "\\x1b[31m");
  EXPECT_EQ(EscapeForTerminal("\x7f"), "\\x7f");
  EXPECT_EQ(EscapeForTerminal("\xE6\x97\xA5"), "\xE6\x97\xA5");
  EXPECT_EQ(EscapeForTerminal("\xE6\x97"), "\\xe6\\x97");  // cut short
  EXPECT_EQ(EscapeForTerminal("\xC2\x85"), "\\xc2\\x85");  // C1 control
  EXPECT_EQ(EscapeForTerminal("\xC0\xAF"), "\\xc0\\xaf");  // overlong
}

}  // namespace
}  // namespace zeroshard
