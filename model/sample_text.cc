#include "model/sample_text.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace zeroshard {
namespace {

constexpr absl::string_view kIdsPrefix = "ids:";

// Length of the valid, printable UTF-8 sequence at s[i] (0: not one).
int Utf8Length(absl::string_view s, size_t i) {
  const Utf8CodePoint p = DecodeUtf8At(s, i);
  if (!p.valid) return 0;
  // C1 controls (U+0080..U+009F) are not printable either.
  if (p.cp >= 0x80 && p.cp <= 0x9F) return 0;
  return p.len;
}

}  // namespace

std::string EscapeForTerminal(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = Utf8Length(s, i);
    const bool control = c < 0x20 && c != '\n' && c != '\t';
    if (len == 0 || control || c == 0x7F) {
      // A C1 control is escaped byte by byte as well.
      out += absl::StrFormat("\\x%02x", c);
      ++i;
      continue;
    }
    out.append(s.data() + i, len);
    i += len;
  }
  return out;
}

absl::StatusOr<SampleText> SampleText::Create(int model_vocab,
                                              const std::string& vocab_path,
                                              const std::string& merges_path) {
  if (model_vocab < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's vocab_size must be positive, got ", model_vocab));
  }
  if (vocab_path.empty() != merges_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a GPT-2 vocabulary needs both files, the vocabulary (vocab.json / "
        "encoder.json) and the merges (merges.txt / vocab.bpe); got only ",
        vocab_path.empty() ? merges_path : vocab_path));
  }
  SampleText t;
  t.model_vocab_ = model_vocab;
  if (!vocab_path.empty()) {
    ASSIGN_OR_RETURN(Gpt2Tokenizer tok, Gpt2Tokenizer::Load(vocab_path, merges_path));
    if (tok.max_id() >= model_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          vocab_path, " has token ids up to ", tok.max_id(),
          ", the model's vocab_size is ", model_vocab,
          " (the vocabulary does not belong to this model)"));
    }
    t.tokenizer_ = std::move(tok);
    t.kind_ = SampleTextKind::kGpt2;
  } else {
    t.kind_ = model_vocab <= 256 ? SampleTextKind::kBytes : SampleTextKind::kIds;
  }
  return t;
}

const char* SampleText::kind_name() const {
  switch (kind_) {
    case SampleTextKind::kBytes:
      return "bytes";
    case SampleTextKind::kIds:
      return "ids";
    case SampleTextKind::kGpt2:
      return "gpt2";
  }
  return "?";
}

std::string SampleText::DefaultPrompt() const {
  return kind_ == SampleTextKind::kIds ? "ids:0" : "The";
}

absl::StatusOr<std::vector<int32_t>> SampleText::EncodePrompt(
    absl::string_view prompt) const {
  std::vector<int32_t> ids;
  if (absl::StartsWith(prompt, kIdsPrefix)) {
    absl::string_view list = prompt.substr(kIdsPrefix.size());
    if (absl::StripAsciiWhitespace(list).empty()) {
      return absl::InvalidArgumentError(
          "the prompt \"ids:\" lists no token ids (e.g. ids:15496,995)");
    }
    for (absl::string_view part : absl::StrSplit(list, ',')) {
      part = absl::StripAsciiWhitespace(part);
      int64_t id;
      if (!absl::SimpleAtoi(part, &id) || id < 0 ||
          id > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt \"", prompt, "\": \"", part,
            "\" is not a token id (ids:ID,ID,... with non-negative integers)"));
      }
      if (id >= model_vocab_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt token ", id, " is not below the model's vocab_size ",
            model_vocab_));
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  }
  if (prompt.empty()) {
    return absl::InvalidArgumentError(
        "the prompt is empty: give some text, or token ids as ids:ID,ID,...");
  }
  switch (kind_) {
    case SampleTextKind::kIds:
      return absl::InvalidArgumentError(absl::StrCat(
          "a text prompt needs a GPT-2 vocabulary for a model with vocab_size ",
          model_vocab_, " (vocab.json + merges.txt); or give token ids as "
          "ids:ID,ID,..."));
    case SampleTextKind::kBytes:
      for (char c : prompt) {
        const int32_t b = static_cast<unsigned char>(c);
        if (b >= model_vocab_) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "prompt byte 0x%02x is not below the model's vocab_size %d", b,
              model_vocab_));
        }
        ids.push_back(b);
      }
      return ids;
    case SampleTextKind::kGpt2:
      return tokenizer_->Encode(prompt);
  }
  return ids;
}

std::string SampleText::Render(const std::vector<int32_t>& ids) const {
  switch (kind_) {
    case SampleTextKind::kIds:
      return absl::StrJoin(ids, ",");
    case SampleTextKind::kBytes: {
      std::string bytes;
      for (int32_t id : ids) {
        if (id >= 0 && id < 256) {
          bytes.push_back(static_cast<char>(id));
        } else {
          bytes += absl::StrCat("<|", id, "|>");
        }
      }
      return EscapeForTerminal(bytes);
    }
    case SampleTextKind::kGpt2: {
      std::string text;
      std::vector<int32_t> run;
      auto flush = [&] {
        if (run.empty()) return;
        // Every id in run is known, so Decode succeeds.
        text += tokenizer_->Decode(run).value_or("");
        run.clear();
      };
      for (int32_t id : ids) {
        if (tokenizer_->HasId(id)) {
          run.push_back(id);
        } else {
          flush();
          text += absl::StrCat("<|", id, "|>");
        }
      }
      flush();
      return EscapeForTerminal(text);
    }
  }
  return "";
}

}  // namespace zeroshard
