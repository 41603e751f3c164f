// GPT-2's byte-level BPE tokenizer, read from the two files every GPT-2
// release ships: the vocabulary (Hugging Face's vocab.json, OpenAI's
// encoder.json: a JSON object token -> id) and the merges (merges.txt,
// vocab.bpe: an optional "#version" line, then one "left right" pair per
// line, highest priority first).
//
//   ASSIGN_OR_RETURN(Gpt2Tokenizer tok,
//                    Gpt2Tokenizer::Load("gpt2/vocab.json", "gpt2/merges.txt"));
//   ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode("Hello world"));
//   // ids == {15496, 995} with GPT-2's files
//   ASSIGN_OR_RETURN(std::string text, tok.Decode(ids));  // "Hello world"
//
// Contracts:
// - Bytes, not characters, are the alphabet: every byte maps to one printable
//   Unicode character (Gpt2ByteToUnicode, OpenAI's bytes_to_unicode), so any
//   byte string encodes and Decode(Encode(s)) == s whenever the vocabulary
//   holds the 256 byte characters (GPT-2's does).
// - Encode splits the text as GPT-2's pattern does
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   then applies the merges to each piece, lowest rank first. Letters,
//   numbers and white space are exact for ASCII and Latin-1; above U+00FF a
//   code point counts as a letter unless it is white space, a digit of the
//   common scripts, general or CJK punctuation, or a symbol/emoji block (an
//   approximation of the Unicode tables, documented in docs/DESIGN.md).
//   Special tokens such as <|endoftext|> are not recognised in text (as
//   tiktoken's default): they encode as ordinary characters.
// - Byte fallback: a merged piece the vocabulary lacks is emitted as its
//   single-byte tokens; a byte whose token is missing too is
//   INVALID_ARGUMENT naming the byte and the vocabulary file.
// - Decode of an id the vocabulary lacks, or of a token holding a character
//   outside the byte map, is INVALID_ARGUMENT naming the id.
// - Load errors name the file (and the line or key): unreadable file
//   (NOT_FOUND), not a JSON object of non-negative integer ids, a repeated
//   id, a merges line that is not two tokens.
#ifndef ZEROSHARD_MODEL_GPT2_TOKENIZER_H_
#define ZEROSHARD_MODEL_GPT2_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

// OpenAI's bytes_to_unicode: the UTF-8 spelling of the character each byte
// stands for (printable bytes map to themselves; 0x20 ' ' -> U+0120 'Ġ').
const std::array<std::string, 256>& Gpt2ByteToUnicode();

// GPT-2's pre-tokenizer: the pieces of `text` that merges never cross
// (views into `text`; concatenated they give `text` back).
std::vector<absl::string_view> Gpt2PreTokenize(absl::string_view text);

class Gpt2Tokenizer {
 public:
  static absl::StatusOr<Gpt2Tokenizer> Load(const std::string& vocab_path,
                                            const std::string& merges_path);
  // The same from the files' contents; `source` names them in errors.
  static absl::StatusOr<Gpt2Tokenizer> FromText(absl::string_view vocab_json,
                                                absl::string_view merges_text,
                                                const std::string& source);

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;
  // Whether Decode knows the id.
  bool HasId(int32_t id) const;

  // Entries of the vocabulary, and the largest id (-1 when empty).
  size_t size() const { return encoder_.size(); }
  int32_t max_id() const { return max_id_; }

 private:
  Gpt2Tokenizer() = default;
  // The merges applied to one pre-tokenized piece (in byte characters).
  std::vector<std::string> Bpe(const std::vector<std::string>& symbols) const;

  std::string source_;
  absl::flat_hash_map<std::string, int32_t> encoder_;
  absl::flat_hash_map<int32_t, std::string> decoder_;
  absl::flat_hash_map<std::string, int> ranks_;  // "left right" -> rank
  absl::flat_hash_map<std::string, uint8_t> byte_of_char_;
  int32_t max_id_ = -1;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_GPT2_TOKENIZER_H_
