// Causal multi-head self-attention on a CUDA device, with the CPU op's
// contract (model/kernels/cpu/attention.h): S = Q K^T / sqrt(hd) masked to
// j <= i, P = softmax(S) saved in probs [B, H, T, T] in the qkv dtype (zeros
// above the diagonal), Y = P V; the backward reads P back and writes dqkv.
// With BF16, dy and dS are rounded to BF16 for the products, as on the CPU.
//
//   RETURN_IF_ERROR(cuda::AttentionForward(shape, qkv, probs, y, stream));
//   RETURN_IF_ERROR(cuda::AttentionBackward(shape, qkv, probs, dy, dqkv, s));
//
// A straightforward first version: one block per query row (forward, and dQ
// in the backward) or key row (dK, dV), the row's scores in shared memory,
// float accumulation; the backward keeps dS [B, H, T, T] (FP32) in
// stream-ordered scratch. It is the device's correctness baseline, tested
// against the CPU reference; a fused kernel (cuDNN's, or an online-softmax
// one) is what a fast GPT-2 step needs. T is at most 12000 (the row's
// scores and the kernels' own shared memory within 48 KiB).
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_ATTENTION_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_ATTENTION_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "model/kernels/attention_shape.h"

namespace zeroshard::kernels::cuda {

absl::Status AttentionForward(const AttentionShape& s, const void* qkv,
                              void* probs, float* y, cudaStream_t stream);

absl::Status AttentionBackward(const AttentionShape& s, const void* qkv,
                               const void* probs, const float* dy, float* dqkv,
                               cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_ATTENTION_H_
