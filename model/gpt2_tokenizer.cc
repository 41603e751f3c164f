#include "model/gpt2_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"

namespace zeroshard {
namespace {

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsNumber(char32_t c) {
  return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 ||
         (c >= 0xBC && c <= 0xBE) || (c >= 0x660 && c <= 0x669) ||
         (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x966 && c <= 0x96F) ||
         (c >= 0x2070 && c <= 0x2079) || (c >= 0x2080 && c <= 0x2089) ||
         (c >= 0x2150 && c <= 0x218B) || (c >= 0x2460 && c <= 0x249B) ||
         (c >= 0xFF10 && c <= 0xFF19);
}

bool IsLetter(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c <= 0xFF) {  // Latin-1: exact
    return c == 0xAA || c == 0xB5 || c == 0xBA ||
           (c >= 0xC0 && c != 0xD7 && c != 0xF7);
  }
  if (IsSpace(c) || IsNumber(c)) return false;
  // Punctuation, symbols, arrows, box drawing, dingbats, CJK punctuation,
  // private use, specials, emoji: not letters.
  if ((c >= 0x2000 && c <= 0x2BFF) || (c >= 0x3000 && c <= 0x303F) ||
      (c >= 0xE000 && c <= 0xF8FF) || (c >= 0xFE30 && c <= 0xFE4F) ||
      (c >= 0xFF00 && c <= 0xFF20) || (c >= 0xFFF0 && c <= 0xFFFF) ||
      (c >= 0x1F000 && c <= 0x1FAFF)) {
    return false;
  }
  return true;
}

enum class Class { kLetter, kNumber, kSpace, kOther };

Class ClassOf(const Utf8CodePoint& p) {
  if (!p.valid) return Class::kOther;
  if (IsSpace(p.cp)) return Class::kSpace;
  if (IsLetter(p.cp)) return Class::kLetter;
  if (IsNumber(p.cp)) return Class::kNumber;
  return Class::kOther;
}

absl::StatusOr<std::string> ReadAll(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the GPT-2 ", what, " file ", path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<absl::string_view> Gpt2PreTokenize(absl::string_view text) {
  // Code points with their byte offsets.
  std::vector<Utf8CodePoint> cps;
  std::vector<size_t> at;
  for (size_t i = 0; i < text.size();) {
    Utf8CodePoint p = DecodeUtf8At(text, i);
    cps.push_back(p);
    at.push_back(i);
    i += p.len;
  }
  at.push_back(text.size());
  const size_t n = cps.size();
  auto cls = [&](size_t k) { return ClassOf(cps[k]); };
  auto run = [&](size_t k, Class c) {  // end of the run of class c from k
    while (k < n && cls(k) == c) ++k;
    return k;
  };
  std::vector<absl::string_view> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (cps[i].cp == '\'' && i + 1 < n) {
      const char32_t a = cps[i + 1].cp;
      const char32_t b = i + 2 < n ? cps[i + 2].cp : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        end = i + 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
                 (a == 'l' && b == 'l')) {
        end = i + 3;
      }
    }
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    if (end == i) {
      const size_t s = (cps[i].cp == ' ' && i + 1 < n) ? i + 1 : i;
      for (Class c : {Class::kLetter, Class::kNumber, Class::kOther}) {
        if (cls(s) == c) {
          end = run(s, c);
          break;
        }
      }
    }
    // \s+(?!\S) | \s+
    if (end == i) {
      const size_t j = run(i, Class::kSpace);
      end = (j == n || j - i == 1) ? j : j - 1;
    }
    pieces.push_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return pieces;
}

const std::array<std::string, 256>& Gpt2ByteToUnicode() {
  static const std::array<std::string, 256> kMap = [] {
    std::array<std::string, 256> m;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                             (b >= 0xAE && b <= 0xFF);
      AppendUtf8(printable ? static_cast<char32_t>(b)
                           : static_cast<char32_t>(256 + extra++),
                 &m[b]);
    }
    return m;
  }();
  return kMap;
}

absl::StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::Load(const std::string& vocab_path,
                                                  const std::string& merges_path) {
  ASSIGN_OR_RETURN(std::string vocab, ReadAll(vocab_path, "vocabulary"));
  ASSIGN_OR_RETURN(std::string merges, ReadAll(merges_path, "merges"));
  ASSIGN_OR_RETURN(Gpt2Tokenizer t,
                   FromText(vocab, merges, vocab_path + " / " + merges_path));
  return t;
}

absl::StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::FromText(
    absl::string_view vocab_json, absl::string_view merges_text,
    const std::string& source) {
  Gpt2Tokenizer t;
  t.source_ = source;
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(vocab_json.begin(), vocab_json.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the vocabulary is not valid JSON: ", e.what()));
  }
  if (!doc.is_object() || doc.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the vocabulary must be a non-empty JSON object "
                "{\"token\": id, ...}"));
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": vocabulary key \"", it.key(),
          "\" must map to a non-negative integer id, got ", v.dump()));
    }
    const int32_t id = static_cast<int32_t>(v.get<int64_t>());
    if (!t.decoder_.emplace(id, it.key()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": id ", id, " is given to both \"", t.decoder_[id],
          "\" and \"", it.key(), "\""));
    }
    t.encoder_.emplace(it.key(), id);
    t.max_id_ = std::max(t.max_id_, id);
  }
  int line_no = 0, rank = 0;
  for (absl::string_view line : absl::StrSplit(merges_text, '\n')) {
    ++line_no;
    line = absl::StripSuffix(line, "\r");
    if (line.empty() || (line_no == 1 && absl::StartsWith(line, "#version"))) {
      continue;
    }
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": merges line ", line_no, " is not two tokens \"left right\": \"",
          line, "\""));
    }
    t.ranks_.emplace(std::string(line), rank++);  // a repeat keeps its first rank
  }
  const auto& map = Gpt2ByteToUnicode();
  for (int b = 0; b < 256; ++b) t.byte_of_char_[map[b]] = static_cast<uint8_t>(b);
  return t;
}

std::vector<std::string> Gpt2Tokenizer::Bpe(
    const std::vector<std::string>& symbols) const {
  std::vector<std::string> word = symbols;
  while (word.size() > 1) {
    int best = std::numeric_limits<int>::max();
    std::string best_pair;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      std::string pair = absl::StrCat(word[i], " ", word[i + 1]);
      auto it = ranks_.find(pair);
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        best_pair = std::move(pair);
      }
    }
    if (best_pair.empty()) break;
    // Merge every occurrence of the best pair, left to right.
    std::vector<std::string> next;
    next.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() &&
          absl::StrCat(word[i], " ", word[i + 1]) == best_pair) {
        next.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        next.push_back(word[i]);
        ++i;
      }
    }
    word = std::move(next);
  }
  return word;
}

absl::StatusOr<std::vector<int32_t>> Gpt2Tokenizer::Encode(
    absl::string_view text) const {
  const auto& map = Gpt2ByteToUnicode();
  std::vector<int32_t> ids;
  for (absl::string_view piece : Gpt2PreTokenize(text)) {
    std::vector<std::string> symbols;
    for (char c : piece) symbols.push_back(map[static_cast<unsigned char>(c)]);
    for (const std::string& token : Bpe(symbols)) {
      if (auto it = encoder_.find(token); it != encoder_.end()) {
        ids.push_back(it->second);
        continue;
      }
      // Byte fallback: the token's bytes one by one.
      for (size_t i = 0; i < token.size();) {
        const Utf8CodePoint p = DecodeUtf8At(token, i);
        const std::string ch(token.substr(i, p.len));
        i += p.len;
        auto it = encoder_.find(ch);
        if (it == encoder_.end()) {
          const uint8_t byte = byte_of_char_.at(ch);
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: byte 0x%02x (token \"%s\") is not in the vocabulary, so "
              "text holding it cannot be encoded",
              source_, byte, ch));
        }
        ids.push_back(it->second);
      }
    }
  }
  return ids;
}

bool Gpt2Tokenizer::HasId(int32_t id) const { return decoder_.contains(id); }

absl::StatusOr<std::string> Gpt2Tokenizer::Decode(
    const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    auto it = decoder_.find(id);
    if (it == decoder_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is not in the vocabulary ", source_,
          " (ids 0..", max_id_, ")"));
    }
    const std::string& token = it->second;
    for (size_t i = 0; i < token.size();) {
      const Utf8CodePoint p = DecodeUtf8At(token, i);
      auto b = byte_of_char_.find(token.substr(i, p.len));
      if (b == byte_of_char_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", id, " (\"", token, "\") in ", source_,
            " holds a character outside GPT-2's byte map"));
      }
      out.push_back(static_cast<char>(b->second));
      i += p.len;
    }
  }
  return out;
}

}  // namespace zeroshard
