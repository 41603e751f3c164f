// TokenFile: one pre-tokenized file, memory-mapped read-only and checked.
//
// Two formats, as the established tools write them:
// - kLlmc: llm.c's `.bin` shard (dev/data/data_common.py, write_datafile): a
//   header of 256 little-endian int32 — [0] magic 20240520, [1] version 1
//   (uint16 tokens), [2] token count — then exactly that many uint16 tokens.
//   llm.c's version 2 (magic 20240801, uint32 tokens, Llama 3) is refused
//   with a message saying so.
// - kUint16: a bare array of little-endian uint16 tokens, as nanoGPT's
//   prepare.py writes train.bin / val.bin (np.uint16 .tofile); no header.
// kAuto reads the first int32: 20240520 -> kLlmc, else kUint16.
//
//   ASSIGN_OR_RETURN(TokenFile f, TokenFile::Open("val.bin", DataFormat::kAuto,
//                                                 /*vocab=*/50257));
//   absl::Span<const uint16_t> tokens = f.tokens();
//
// Contracts: every error names the file. Open fails with NOT_FOUND when the
// file cannot be opened, and DATA_LOSS for a short or corrupt header (wrong
// magic or version, negative count), a size that disagrees with the header's
// count, an odd byte length (kUint16), no tokens at all, or a token >= vocab
// (the message gives the token's index and byte offset; the scan reads
// every page once, and is skipped when vocab > 65535). Nothing is copied:
// tokens() points into the mapping, which lives while any copy of the
// TokenFile does. Immutable; safe to share between threads.
#ifndef ZEROSHARD_WORKER_DATA_TOKEN_FILE_H_
#define ZEROSHARD_WORKER_DATA_TOKEN_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/config.h"

namespace zeroshard {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int32_t kLlmcMagicUint32 = 20240801;  // llm.c's Llama 3 shards
inline constexpr int kLlmcHeaderInts = 256;
inline constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);

class TokenFile {
 public:
  // `format` is kLlmc, kUint16 or kAuto (kBytes is INVALID_ARGUMENT).
  static absl::StatusOr<TokenFile> Open(const std::string& path, DataFormat format,
                                        int vocab);

  const std::string& path() const { return path_; }
  DataFormat format() const { return format_; }  // kLlmc or kUint16
  absl::Span<const uint16_t> tokens() const { return tokens_; }

 private:
  TokenFile(std::string path, DataFormat format, std::shared_ptr<const void> mapping,
            absl::Span<const uint16_t> tokens)
      : path_(std::move(path)), format_(format), mapping_(std::move(mapping)), tokens_(tokens) {}

  std::string path_;
  DataFormat format_;
  std::shared_ptr<const void> mapping_;  // munmap on the last copy
  absl::Span<const uint16_t> tokens_;
};

// Writers for tests and tools: an llm.c shard and a bare uint16 array.
absl::Status WriteLlmcFile(const std::string& path, absl::Span<const uint16_t> tokens);
absl::Status WriteUint16File(const std::string& path, absl::Span<const uint16_t> tokens);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_DATA_TOKEN_FILE_H_
