// Linear layer y = x W + b with Hugging Face GPT-2 Conv1D weights W [in, out].
//
//   LinearForward(x, w, bias, M, /*in=*/C, /*out=*/3 * C, y);
//   LinearBackward(dy, x, w, M, C, 3 * C, dx, dw, dbias);
//
// x and W may be FP32 or BF16 (MatRef::dtype; ld is ignored and taken as
// dense). y, dy, dx and the gradients are FP32. When x/W are BF16, dy is
// rounded to BF16 for the two backward products (mixed precision).
#ifndef ZEROSHARD_MODEL_KERNELS_CPU_LINEAR_H_
#define ZEROSHARD_MODEL_KERNELS_CPU_LINEAR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace zeroshard::kernels::cpu {

// A dense row-major tensor in FP32 or BF16.
struct ConstTensor {
  const void* data = nullptr;
  DType dtype = DType::kFp32;
};

// y[M,out] = x[M,in] W[in,out] + bias (bias may be null).
absl::Status LinearForward(ConstTensor x, ConstTensor w, const float* bias,
                           int64_t m, int64_t in, int64_t out, float* y);

// dx[M,in] = dy W^T (written; dx may be null to skip), dw[in,out] += x^T dy,
// dbias[out] += column sums of dy (dbias may be null when there is no bias).
absl::Status LinearBackward(const float* dy, ConstTensor x, ConstTensor w,
                            int64_t m, int64_t in, int64_t out, float* dx,
                            float* dw, float* dbias);

}  // namespace zeroshard::kernels::cpu

#endif  // ZEROSHARD_MODEL_KERNELS_CPU_LINEAR_H_
