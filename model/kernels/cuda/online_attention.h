// Causal self-attention with an online softmax on a CUDA device
// (FlashAttention's recurrence, model/kernels/online_softmax.h): the
// forward saves lse [B, H, T] (FP32) instead of the T x T probabilities, and
// the backward recomputes them, so attention's saved memory grows with T,
// not T^2 — what long contexts need. The contract is the CPU twin's
// (model/kernels/cpu/online_attention.h): qkv [B, T, 3C] FP32 or BF16,
// y, dy, dqkv FP32, FP32 arithmetic throughout, head dims 16/32/64/128.
//
//   RETURN_IF_ERROR(cuda::OnlineAttentionForward(s, qkv, lse, y, stream));
//   RETURN_IF_ERROR(cuda::OnlineAttentionBackward(s, qkv, lse, y, dy, dqkv,
//                                                 stream));
//
// Three kernels, one thread per query (forward, dQ) or key (dK, dV) row,
// blocks of 64 rows; the other side's rows stream through shared memory in
// tiles of kOnlineKeyTile, and every thread runs the shared row functions
// on its row, in the twin's order, so the device matches the twin up to its
// expf/logf and fused multiply-adds. dQ and dK/dV are separate passes (no
// atomics: deterministic). It is FP32 SIMT arithmetic, not tensor-core
// products: the model's default attention stays GemmAttention
// (attention_gemm.h) until a device measures both.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_ONLINE_ATTENTION_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_ONLINE_ATTENTION_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "model/kernels/attention_shape.h"

namespace zeroshard::kernels::cuda {

absl::Status OnlineAttentionForward(const AttentionShape& s, const void* qkv,
                                    float* lse, float* y, cudaStream_t stream);

// Writes dqkv (every element); reads the forward's lse and y.
absl::Status OnlineAttentionBackward(const AttentionShape& s, const void* qkv,
                                     const float* lse, const float* y,
                                     const float* dy, float* dqkv,
                                     cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_ONLINE_ATTENTION_H_
