// Causal self-attention with an online softmax on the CPU: the twin of the
// CUDA kernels of model/kernels/cuda/online_attention.h. It runs their row
// functions (model/kernels/online_softmax.h) over the same tiles in plain
// loops, so the device's arithmetic is tested on every machine against the
// CPU attention (tests/model/kernels_online_attention_test.cc), and the
// device test has an oracle computing the same recurrence.
//
// Unlike AttentionForward (attention.h) nothing of size T x T is kept: the
// forward saves lse [B, H, T] (FP32, the log of each row's softmax
// denominator, plus its maximum) and the backward recomputes the
// probabilities from it. qkv [B, T, 3C] is FP32 or BF16 (widened on load);
// y, dy, dqkv [B, T, C or 3C] are FP32, and every product is FP32 (dy and dS
// are not rounded to BF16). y is written; the backward reads the forward's y
// and lse and writes dqkv.
//
//   RETURN_IF_ERROR(OnlineAttentionForwardTwin(s, qkv, lse, y));
//   RETURN_IF_ERROR(OnlineAttentionBackwardTwin(s, qkv, lse, y, dy, dqkv));
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_ONLINE_ATTENTION_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_ONLINE_ATTENTION_H_

#include "absl/status/status.h"
#include "model/kernels/attention_shape.h"

namespace zeroshard::kernels::cpu {

absl::Status OnlineAttentionForwardTwin(const AttentionShape& s,
                                        const void* qkv, float* lse, float* y);
absl::Status OnlineAttentionBackwardTwin(const AttentionShape& s,
                                         const void* qkv, const float* lse,
                                         const float* y, const float* dy,
                                         float* dqkv);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_ONLINE_ATTENTION_H_
