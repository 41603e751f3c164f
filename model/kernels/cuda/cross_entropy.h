// Softmax cross-entropy over logits [M, V] on a CUDA device, mean over the M
// rows, fused with its backward: the CPU op's contract (model/kernels/cpu/
// cross_entropy.h) with device pointers, a stream, and the loss written to
// device memory (no synchronisation).
//
//   RETURN_IF_ERROR(cuda::SoftmaxCrossEntropy(logits, targets, M, V, 1.0f,
//                                             d_loss, logits, stream));
//
// dlogits = grad_scale * (softmax(logits) - onehot(target)) / M, written (may
// alias logits). One block per row: its max and sum of exponentials are a
// block reduction, the row's loss and each gradient element
// model/kernels/element_math.h's; the mean over rows is one block's
// fixed-order sum in double. Targets live on the device, so the launcher
// cannot read them: the caller checks them against V on the host (the data
// loader checks every token it reads, data/); a target outside [0, V)
// reads nothing out of bounds and makes the loss NaN.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_CROSS_ENTROPY_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_CROSS_ENTROPY_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cuda {

absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* targets,
                                 int64_t m, int64_t vocab, float grad_scale,
                                 double* loss, float* dlogits,
                                 cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_CROSS_ENTROPY_H_
