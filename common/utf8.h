// Decoding one UTF-8 code point, for the GPT-2 tokenizer's pre-tokenizer
// (model/gpt2_tokenizer.cc) and the terminal escaping of sampled text
// (model/sample_text.cc).
//
//   for (size_t i = 0; i < s.size();) {
//     const Utf8CodePoint p = DecodeUtf8At(s, i);
//     if (p.valid) Use(p.cp);
//     i += p.len;
//   }
//
// Contract: DecodeUtf8At needs i < s.size(). A well-formed sequence (shortest
// form, at most U+10FFFF, no surrogate, complete within `s`) gives its code
// point, its length 1-4 and valid = true. Anything else (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, a lead
// byte 0xF8 and above) gives valid = false, len = 1 and cp = the byte's
// value, so that a caller steps over it one byte at a time. Never fails.
#ifndef ZEROSHARD_COMMON_UTF8_H_
#define ZEROSHARD_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace zeroshard {

struct Utf8CodePoint {
  char32_t cp = 0;
  int len = 1;
  bool valid = true;
};

Utf8CodePoint DecodeUtf8At(absl::string_view s, size_t i);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_UTF8_H_
