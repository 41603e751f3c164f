#include "model/kernels/cpu/embedding.h"

#include "absl/strings/str_cat.h"

namespace zeroshard::kernels::cpu {

absl::Status CheckTokens(const int32_t* tokens, int64_t n, int64_t vocab,
                         const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "[", i, "] = ", tokens[i], " is outside the vocabulary [0, ",
          vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingForward(const int32_t* tokens, int64_t b, int64_t t,
                              int64_t c, int64_t vocab, const float* wte,
                              const float* wpe, float* out) {
  if (b <= 0 || t <= 0 || c <= 0) {
    return absl::InvalidArgumentError("embedding: sizes must be positive");
  }
  if (absl::Status s = CheckTokens(tokens, b * t, vocab, "token"); !s.ok()) return s;
  for (int64_t i = 0; i < b * t; ++i) {
    const float* e = wte + static_cast<int64_t>(tokens[i]) * c;
    const float* p = wpe + (i % t) * c;
    float* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = e[j] + p[j];
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(const float* dout, const int32_t* tokens,
                               int64_t b, int64_t t, int64_t c, int64_t vocab,
                               float* dwte, float* dwpe) {
  if (b <= 0 || t <= 0 || c <= 0) {
    return absl::InvalidArgumentError("embedding: sizes must be positive");
  }
  if (absl::Status s = CheckTokens(tokens, b * t, vocab, "token"); !s.ok()) return s;
  for (int64_t i = 0; i < b * t; ++i) {
    const float* d = dout + i * c;
    float* e = dwte + static_cast<int64_t>(tokens[i]) * c;
    float* p = dwpe + (i % t) * c;
    for (int64_t j = 0; j < c; ++j) {
      e[j] += d[j];
      p[j] += d[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::kernels::cpu
