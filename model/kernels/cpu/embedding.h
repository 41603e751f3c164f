// Token + learned position embedding: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:].
//
//   RETURN_IF_ERROR(EmbeddingForward(tokens, B, T, C, V, wte, wpe, x));
//   RETURN_IF_ERROR(EmbeddingBackward(dx, tokens, B, T, C, V, dwte, dwpe));
//
// Tokens are validated against [0, V) before anything is written. wte, wpe
// FP32; dwte, dwpe are accumulated.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_EMBEDDING_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

// Checks that every token is in [0, vocab).
absl::Status CheckTokens(const int32_t* tokens, int64_t n, int64_t vocab,
                         const char* what);

absl::Status EmbeddingForward(const int32_t* tokens, int64_t b, int64_t t,
                              int64_t c, int64_t vocab, const float* wte,
                              const float* wpe, float* out);

absl::Status EmbeddingBackward(const float* dout, const int32_t* tokens,
                               int64_t b, int64_t t, int64_t c, int64_t vocab,
                               float* dwte, float* dwpe);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_EMBEDDING_H_
