#include "model/kernels/cuda/embedding.h"

#include "model/kernels/cuda/launch.h"

namespace zeroshard::kernels::cuda {
namespace {

// Element i of [b*t, c]; wpe null: no position table.
__global__ void EmbeddingForwardKernel(const int32_t* __restrict__ tokens,
                                       int64_t rows, int64_t t, int64_t c,
                                       int64_t vocab,
                                       const float* __restrict__ wte,
                                       const float* __restrict__ wpe,
                                       float* __restrict__ out) {
  const int64_t n = rows * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / c, j = i % c;
    const int32_t tok = tokens[row];
    const float pos = wpe != nullptr ? wpe[(row % t) * c + j] : 0.0f;
    out[i] = (tok >= 0 && tok < vocab) ? wte[tok * c + j] + pos : pos;
  }
}

__global__ void TokenGradKernel(const float* __restrict__ dout,
                                const int32_t* __restrict__ tokens,
                                int64_t rows, int64_t c, int64_t vocab,
                                float* __restrict__ dwte) {
  const int64_t n = rows * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / c, j = i % c;
    const int32_t tok = tokens[row];
    if (tok >= 0 && tok < vocab) atomicAdd(&dwte[tok * c + j], dout[i]);
  }
}

// dwpe[p, j] += sum over the batch of dout[bi, p, j], batch in order.
__global__ void PositionGradKernel(const float* __restrict__ dout, int64_t b,
                                   int64_t t, int64_t c,
                                   float* __restrict__ dwpe) {
  const int64_t n = t * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0;
    for (int64_t bi = 0; bi < b; ++bi) s += dout[bi * n + i];
    dwpe[i] += s;
  }
}

absl::Status CheckShape(const char* op, int64_t b, int64_t t, int64_t c,
                        int64_t vocab) {
  if (b <= 0 || t <= 0 || c <= 0 || vocab <= 0 ||
      b > (int64_t{1} << 40) / t || b * t > (int64_t{1} << 40) / c ||
      vocab > (int64_t{1} << 40) / c) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes must be positive and their products below 2^40: b=", b,
        " t=", t, " c=", c, " vocab=", vocab));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EmbeddingForward(const int32_t* tokens, int64_t b, int64_t t,
                              int64_t c, int64_t vocab, const float* wte,
                              const float* wpe, float* out,
                              cudaStream_t stream) {
  const char* op = "cuda::EmbeddingForward";
  RETURN_IF_ERROR(CheckShape(op, b, t, c, vocab));
  RETURN_IF_ERROR(CheckElementwise(op, b * t * c, {tokens, wte, wpe, out}));
  EmbeddingForwardKernel<<<GridFor(b * t * c), kThreads, 0, stream>>>(
      tokens, b * t, t, c, vocab, wte, wpe, out);
  return LaunchStatus(op);
}

absl::Status EmbeddingBackward(const float* dout, const int32_t* tokens,
                               int64_t b, int64_t t, int64_t c, int64_t vocab,
                               float* dwte, float* dwpe, cudaStream_t stream) {
  const char* op = "cuda::EmbeddingBackward";
  RETURN_IF_ERROR(CheckShape(op, b, t, c, vocab));
  RETURN_IF_ERROR(CheckElementwise(op, b * t * c, {dout, tokens, dwte, dwpe}));
  TokenGradKernel<<<GridFor(b * t * c), kThreads, 0, stream>>>(
      dout, tokens, b * t, c, vocab, dwte);
  RETURN_IF_ERROR(LaunchStatus(op));
  PositionGradKernel<<<GridFor(t * c), kThreads, 0, stream>>>(dout, b, t, c,
                                                              dwpe);
  return LaunchStatus(op);
}

absl::Status TokenEmbeddingForward(const int32_t* tokens, int64_t rows,
                                   int64_t c, int64_t vocab, const float* wte,
                                   float* out, cudaStream_t stream) {
  const char* op = "cuda::TokenEmbeddingForward";
  RETURN_IF_ERROR(CheckShape(op, rows, 1, c, vocab));
  RETURN_IF_ERROR(CheckElementwise(op, rows * c, {tokens, wte, out}));
  EmbeddingForwardKernel<<<GridFor(rows * c), kThreads, 0, stream>>>(
      tokens, rows, 1, c, vocab, wte, nullptr, out);
  return LaunchStatus(op);
}

absl::Status TokenEmbeddingBackward(const float* dout, const int32_t* tokens,
                                    int64_t rows, int64_t c, int64_t vocab,
                                    float* dwte, cudaStream_t stream) {
  const char* op = "cuda::TokenEmbeddingBackward";
  RETURN_IF_ERROR(CheckShape(op, rows, 1, c, vocab));
  RETURN_IF_ERROR(CheckElementwise(op, rows * c, {dout, tokens, dwte}));
  TokenGradKernel<<<GridFor(rows * c), kThreads, 0, stream>>>(
      dout, tokens, rows, c, vocab, dwte);
  return LaunchStatus(op);
}

}  // namespace zeroshard::kernels::cuda
