// Causal multi-head self-attention (GPT-2): for each batch b and head h,
//   S = Q K^T / sqrt(hd), masked to j <= i, P = softmax(S), Y = P V,
// with Q, K, V the head's columns of qkv [B, T, 3C] = [q | k | v] and head h
// at columns [h*hd, (h+1)*hd) of each third. Y is written to y [B, T, C] with
// heads merged back in order.
//
//   AttentionShape s{.batch = B, .seq = T, .width = C, .heads = H};
//   RETURN_IF_ERROR(AttentionForward(s, qkv, probs, y));
//   RETURN_IF_ERROR(AttentionBackward(s, qkv, probs, dy, dqkv));
//
// qkv and probs [B, H, T, T] share one dtype (FP32 or BF16): the forward
// writes P rounded to that dtype (zeros above the diagonal) and the backward
// reads it back, so saved attention probabilities cost 2 bytes each in BF16.
// y, dy, dqkv are FP32; dqkv is written. With BF16, dy and dS are rounded to
// BF16 for the products (mixed precision, see gemm.h).
//
// The fast path runs one (b, h) pair per thread with oneDNN products; the
// reference runs the same arithmetic as plain loops.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_ATTENTION_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "model/kernels/attention_shape.h"

namespace zeroshard::kernels::cpu {

// Shared with the CUDA attention (model/kernels/attention_shape.h).
using kernels::AttentionShape;

absl::Status AttentionForward(const AttentionShape& s, const void* qkv,
                              void* probs, float* y);
absl::Status AttentionBackward(const AttentionShape& s, const void* qkv,
                               const void* probs, const float* dy, float* dqkv);

absl::Status AttentionForwardReference(const AttentionShape& s, const void* qkv,
                                       void* probs, float* y);
absl::Status AttentionBackwardReference(const AttentionShape& s,
                                        const void* qkv, const void* probs,
                                        const float* dy, float* dqkv);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_ATTENTION_H_
