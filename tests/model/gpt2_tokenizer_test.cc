// GPT-2's byte-level BPE (model/gpt2_tokenizer.h) on a small hand-made
// vocabulary: the byte map, the pre-tokenizer's pieces, merges by rank,
// byte fallback, decode, and load errors naming the file.
#include "model/gpt2_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

using Ids = std::vector<int32_t>;

// Whether `text` contains `part` (printing both when not).
::testing::AssertionResult Has(absl::string_view text, absl::string_view part) {
  if (text.find(part) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

// Every byte's character with id = the byte, then the merged tokens.
std::string HandVocab(const std::vector<std::string>& merged) {
  nlohmann::json v = nlohmann::json::object();
  const auto& map = Gpt2ByteToUnicode();
  for (int b = 0; b < 256; ++b) v[map[b]] = b;
  int id = 256;
  for (const std::string& t : merged) v[t] = id++;
  return v.dump();
}

// Merges, highest priority first. "r l" has no token ("rl" is not in the
// vocabulary): its result falls back to bytes. "o Ġ", "t '", "c 1" and
// "Ġ Ġ" would cross pre-tokenizer pieces and must never apply there.
constexpr char kMerges[] =
    "#version: 0.2\n"
    "h e\n"
    "l l\n"
    "\xC4\xA0 w\n"  // "Ġ w"
    "he ll\n"
    "hell o\n"
    "\xC4\xA0w o\n"
    "r l\n"
    "o \xC4\xA0\n"
    "t '\n"
    "c 1\n"
    "\xC4\xA0 \xC4\xA0\n";

Gpt2Tokenizer Hand() {
  auto t = Gpt2Tokenizer::FromText(
      HandVocab({"he", "ll", "\xC4\xA0w", "hell", "hello", "\xC4\xA0wo",
                 "o\xC4\xA0", "t'", "c1", "\xC4\xA0\xC4\xA0"}),
      kMerges, "hand");
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(Gpt2ByteToUnicodeTest, MatchesOpenAIsTable) {
  const auto& m = Gpt2ByteToUnicode();
  EXPECT_EQ(m['A'], "A");
  EXPECT_EQ(m['!'], "!");
  EXPECT_EQ(m['~'], "~");
  EXPECT_EQ(m[0xE9], "\xC3\xA9");   // é is printable: itself
  EXPECT_EQ(m[0x00], "\xC4\x80");   // U+0100 Ā
  EXPECT_EQ(m[' '], "\xC4\xA0");    // U+0120 Ġ
  EXPECT_EQ(m['\n'], "\xC4\x8A");   // U+010A Ċ
  EXPECT_EQ(m[0x7F], "\xC4\xA1");   // U+0121 ġ
  EXPECT_EQ(m[0xA0], "\xC5\x82");   // U+0142 ł
  EXPECT_EQ(m[0xAD], "\xC5\x83");   // U+0143 Ń: the last one
  std::set<std::string> distinct(m.begin(), m.end());
  EXPECT_EQ(distinct.size(), 256u);
}

TEST(Gpt2PreTokenizeTest, SplitsAsGpt2sPattern) {
  using V = std::vector<absl::string_view>;
  EXPECT_EQ(Gpt2PreTokenize("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Gpt2PreTokenize("I'm here's it'll"),
            (V{"I", "'m", " here", "'s", " it", "'ll"}));
  EXPECT_EQ(Gpt2PreTokenize("abc123 def 42"), (V{"abc", "123", " def", " 42"}));
  EXPECT_EQ(Gpt2PreTokenize("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(Gpt2PreTokenize("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Gpt2PreTokenize("x  "), (V{"x", "  "}));
  EXPECT_EQ(Gpt2PreTokenize("hi!!! ok?"), (V{"hi", "!!!", " ok", "?"}));
  EXPECT_EQ(Gpt2PreTokenize(" ?"), (V{" ?"}));
  EXPECT_EQ(Gpt2PreTokenize("caf\xC3\xA9 \xC3\xBC" "ber"),
            (V{"caf\xC3\xA9", " \xC3\xBC" "ber"}));
  EXPECT_EQ(Gpt2PreTokenize("a\xE2\x80\x94" "b"), (V{"a", "\xE2\x80\x94", "b"}));
  EXPECT_TRUE(Gpt2PreTokenize("").empty());
}

TEST(Gpt2TokenizerTest, MergesByRankWithinPiecesAndFallsBackToBytes) {
  Gpt2Tokenizer t = Hand();
  // "hello" merges to one token; " world" to "Ġwo" + "rl" (not in the
  // vocabulary: bytes r, l) + d. "o Ġ" never joins the two pieces.
  auto ids = t.Encode("hello world");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (Ids{260, 261, 'r', 'l', 'd'}));
  auto back = t.Decode(*ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "hello world");
}

TEST(Gpt2TokenizerTest, MergesNeverCrossPieces) {
  Gpt2Tokenizer t = Hand();
  EXPECT_EQ(*t.Encode("it's"), (Ids{'i', 't', '\'', 's'}));
  EXPECT_EQ(*t.Encode("abc1"), (Ids{'a', 'b', 'c', '1'}));
  EXPECT_EQ(*t.Encode("a  b"), (Ids{'a', ' ', ' ', 'b'}));
  // Trailing white space is one piece: the "Ġ Ġ" merge applies.
  EXPECT_EQ(*t.Encode("a  "), (Ids{'a', 265}));
}

TEST(Gpt2TokenizerTest, RoundTripsAnyBytes) {
  Gpt2Tokenizer t = Hand();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (const std::string& s :
       {all, std::string("Caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80!"),
        std::string("\xFF\xFE bad utf-8 \x80"), std::string("tabs\tand\r\nlines")}) {
    auto ids = t.Encode(s);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto back = t.Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s);
  }
}

TEST(Gpt2TokenizerTest, MissingByteTokenIsAClearError) {
  nlohmann::json v = {{"a", 0}, {"b", 1}};
  auto t = Gpt2Tokenizer::FromText(v.dump(), "", "tiny.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Encode("ab"), (Ids{0, 1}));
  auto bad = t->Encode("abc");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status().message(), "byte 0x63"));
  EXPECT_TRUE(Has(bad.status().message(), "tiny.json"));
}

TEST(Gpt2TokenizerTest, DecodeOfAnUnknownIdNamesIt) {
  Gpt2Tokenizer t = Hand();
  auto s = t.Decode({104, 9999});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.status().message(), "9999"));
  EXPECT_TRUE(t.HasId(265));
  EXPECT_FALSE(t.HasId(266));
  EXPECT_EQ(t.max_id(), 265);
  EXPECT_EQ(t.size(), 266u);
}

TEST(Gpt2TokenizerTest, BadFilesAreClearErrors) {
  auto not_json = Gpt2Tokenizer::FromText("{nope", "", "v.json");
  EXPECT_TRUE(Has(not_json.status().message(), "v.json"));
  EXPECT_TRUE(Has(not_json.status().message(), "not valid JSON"));
  auto array = Gpt2Tokenizer::FromText("[1, 2]", "", "v.json");
  EXPECT_TRUE(Has(array.status().message(), "JSON object"));
  auto neg = Gpt2Tokenizer::FromText(R"({"a": -1})", "", "v.json");
  EXPECT_TRUE(Has(neg.status().message(), "\"a\""));
  auto str = Gpt2Tokenizer::FromText(R"({"a": "1"})", "", "v.json");
  EXPECT_TRUE(Has(str.status().message(), "non-negative integer"));
  auto dup = Gpt2Tokenizer::FromText(R"({"a": 1, "b": 1})", "", "v.json");
  EXPECT_TRUE(Has(dup.status().message(), "id 1"));
  auto merges = Gpt2Tokenizer::FromText(R"({"a": 0})", "#version: 0.2\na b\nabc\n",
                                        "m.txt");
  ASSERT_FALSE(merges.ok());
  EXPECT_TRUE(Has(merges.status().message(), "merges line 3"));
  EXPECT_TRUE(Has(merges.status().message(), "m.txt"));
}

TEST(Gpt2TokenizerTest, LoadsFilesAndNamesAMissingOne) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gpt2_tokenizer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string vocab = (dir / "encoder.json").string();
  const std::string merges = (dir / "vocab.bpe").string();
  std::ofstream(vocab) << HandVocab({"he"});
  std::ofstream(merges) << "#version: 0.2\r\nh e\r\n";  // CRLF is accepted
  auto t = Gpt2Tokenizer::Load(vocab, merges);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Encode("hehe"), (Ids{256, 256}));  // every occurrence
  EXPECT_EQ(*t->Encode("he"), (Ids{256}));
  auto missing = Gpt2Tokenizer::Load((dir / "nope.json").string(), merges);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Has(missing.status().message(), "nope.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zeroshard
