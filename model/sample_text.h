// How a text sample's prompt and output map to a model's tokens, for
// zeroshard-train's closing sample and `zeroshard-ctl sample`.
//
//   ASSIGN_OR_RETURN(SampleText text, SampleText::Create(
//       /*model_vocab=*/50257, "gpt2/vocab.json", "gpt2/merges.txt"));
//   ASSIGN_OR_RETURN(std::vector<int32_t> ids, text.EncodePrompt("Hello"));
//   std::printf("%s\n", text.Render(generated).c_str());
//
// Three kinds, chosen by Create:
// - gpt2: with a vocabulary file and a merges file (model/gpt2_tokenizer.h):
//   text prompts are BPE-encoded; output is decoded to text.
// - bytes: without them, for a byte-level model (vocab <= 256, e.g. the
//   built-in corpus's 256): a prompt's bytes are its tokens; output tokens
//   are bytes.
// - ids: without them, for a vocabulary above 256: prompts must be ids and
//   output is printed as ids.
// In every kind a prompt "ids:15496,995" gives the token ids directly.
//
// Contracts:
// - EncodePrompt is INVALID_ARGUMENT for an empty prompt (or "ids:" with
//   none), a malformed id list, an id not below the model's vocabulary, and
//   a text prompt in the ids kind (saying to give ids or a vocabulary).
// - Create: the two files are given together or not at all
//   (INVALID_ARGUMENT); a missing file is NOT_FOUND naming it; a vocabulary
//   with ids at or above the model's vocab_size is INVALID_ARGUMENT naming
//   both sizes.
// - Render never fails: text is made printable (EscapeForTerminal); an id
//   the vocabulary lacks (a model vocabulary padded past the tokenizer's)
//   is shown as "<|id|>".
#ifndef ZEROSHARD_MODEL_SAMPLE_TEXT_H_
#define ZEROSHARD_MODEL_SAMPLE_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/gpt2_tokenizer.h"

namespace zeroshard {

enum class SampleTextKind { kBytes, kIds, kGpt2 };

class SampleText {
 public:
  static absl::StatusOr<SampleText> Create(int model_vocab,
                                           const std::string& vocab_path,
                                           const std::string& merges_path);

  SampleTextKind kind() const { return kind_; }
  // "bytes", "ids" or "gpt2".
  const char* kind_name() const;
  // The prompt used when none is given: "The" (bytes, gpt2) or "ids:0".
  std::string DefaultPrompt() const;

  absl::StatusOr<std::vector<int32_t>> EncodePrompt(absl::string_view prompt) const;
  std::string Render(const std::vector<int32_t>& ids) const;

 private:
  SampleText() = default;
  SampleTextKind kind_ = SampleTextKind::kBytes;
  int model_vocab_ = 0;
  std::optional<Gpt2Tokenizer> tokenizer_;
};

// `bytes` with every byte that is not part of printable UTF-8 shown as
// \xNN (control characters other than newline and tab, DEL, and bytes that
// do not form a valid UTF-8 sequence), and backslashes left as they are.
std::string EscapeForTerminal(absl::string_view bytes);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_SAMPLE_TEXT_H_
