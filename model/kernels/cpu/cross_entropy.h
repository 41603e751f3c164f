// Softmax cross-entropy over logits [M, V], mean over the M tokens, fused
// with its backward. The tied LM head (logits = x wte^T) is two linear
// products done by the caller (see model/gpt_final.cc); at vocab 256
// the FP32 logits of a micro-batch are small, so they are materialised once.
//
//   double loss;
//   RETURN_IF_ERROR(SoftmaxCrossEntropy(logits, targets, M, V,
//                                       /*grad_scale=*/1.0f, &loss, logits));
//
// dlogits = grad_scale * (softmax(logits) - onehot(target)) / M, written
// (may alias logits). grad_scale carries the FP16 loss scale.
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_CROSS_ENTROPY_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cpu {

absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* targets,
                                 int64_t m, int64_t vocab, float grad_scale,
                                 double* loss, float* dlogits);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_CROSS_ENTROPY_H_
