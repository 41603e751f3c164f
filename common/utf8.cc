#include "common/utf8.h"

namespace zeroshard {

Utf8CodePoint DecodeUtf8At(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {c, 1, true};
  int len = 0;
  char32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07;
  } else {
    return {c, 1, false};
  }
  if (i + len > s.size()) return {c, 1, false};
  for (int k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {c, 1, false};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return {c, 1, false};
  }
  return {cp, len, true};
}

}  // namespace zeroshard
