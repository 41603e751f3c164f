// The token file reader (data/token_file.h): llm.c shards and bare
// uint16 arrays, opened from a memory file.
// Input: a format byte (mod 3: llmc, uint16, auto), 2 bytes of vocabulary
// (little-endian, + 1), then the file.
// Checked: an accepted file's tokens are all below the vocabulary, and its
// size is exactly the header plus 2 bytes per token (llmc, with magic
// 20240520, version 1 and the count in the header) or 2 bytes per token
// (uint16).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/fuzz/fuzz_file.h"
#include "tests/fuzz/fuzz_util.h"
#include "data/token_file.h"

namespace zeroshard::fuzz {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "token_file: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  constexpr DataFormat kFormats[] = {DataFormat::kLlmc, DataFormat::kUint16,
                                     DataFormat::kAuto};
  const DataFormat format = kFormats[in.Byte() % 3];
  const int vocab = static_cast<int>(in.Uint(2)) + 1;
  const std::string_view bytes = in.Rest();
  MemFile file(bytes);
  absl::StatusOr<TokenFile> t = TokenFile::Open(file.path(), format, vocab);
  if (!t.ok()) {
    if (t.status().message().find(file.path()) == std::string::npos) {
      Fail("an error does not name the file");
    }
    return;
  }
  const uint64_t n = t->tokens().size();
  if (n == 0) Fail("an accepted file has no tokens");
  for (uint16_t tok : t->tokens()) {
    if (tok >= vocab) Fail("an accepted token is outside the vocabulary");
  }
  if (t->format() == DataFormat::kLlmc) {
    int32_t h[3];
    std::memcpy(h, bytes.data(), sizeof(h));
    if (bytes.size() != kLlmcHeaderBytes + 2 * n || h[0] != kLlmcMagic ||
        h[1] != kLlmcVersion || static_cast<uint64_t>(h[2]) != n) {
      Fail("an accepted llm.c shard disagrees with its header");
    }
  } else if (t->format() != DataFormat::kUint16 || bytes.size() != 2 * n) {
    Fail("an accepted uint16 array has the wrong size");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
