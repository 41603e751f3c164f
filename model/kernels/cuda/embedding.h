// Token + learned position embedding on a CUDA device:
// out[b,t,:] = wte[tok[b,t],:] + wpe[t,:], and its backward (dwte, dwpe
// accumulated); TokenEmbedding* are the same without a position table
// (Llama: the blocks rotate q and k instead). The CPU op's contract (model/kernels/cpu/embedding.h) with
// device pointers and a stream, except that tokens on the device cannot be
// read by the launcher: the caller checks them on the host (the data loader
// checks every token against the vocabulary); a token outside [0, V) is
// skipped by the kernels (no out-of-bounds access) and leaves its row of
// `out` at wpe only.
//
// The backward sums a token's rows with atomicAdd into dwte, so the order of
// those additions, and the last bits of dwte, can differ between runs; dwpe
// is a fixed-order sum over the batch.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_EMBEDDING_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_EMBEDDING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cuda {

absl::Status EmbeddingForward(const int32_t* tokens, int64_t b, int64_t t,
                              int64_t c, int64_t vocab, const float* wte,
                              const float* wpe, float* out,
                              cudaStream_t stream);

absl::Status EmbeddingBackward(const float* dout, const int32_t* tokens,
                               int64_t b, int64_t t, int64_t c, int64_t vocab,
                               float* dwte, float* dwpe, cudaStream_t stream);

// out[r,:] = wte[tok[r],:] over rows = b * t rows (a token outside [0, V)
// leaves its row zero), and dwte[tok[r],:] += dout[r,:].
absl::Status TokenEmbeddingForward(const int32_t* tokens, int64_t rows,
                                   int64_t c, int64_t vocab, const float* wte,
                                   float* out, cudaStream_t stream);
absl::Status TokenEmbeddingBackward(const float* dout, const int32_t* tokens,
                                    int64_t rows, int64_t c, int64_t vocab,
                                    float* dwte, cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_EMBEDDING_H_
