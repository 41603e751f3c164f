// The linear layer y = x W + b on a CUDA device, with the CPU op's contract
// (model/kernels/cpu/linear.h): Hugging Face GPT-2 Conv1D weights W [in,
// out], x and W in FP32 or BF16, y, dy, dx and the gradients FP32; with BF16
// operands dy is rounded to BF16 once for the two backward products; dbias
// sums dy's FP32 rows in row order per column, as the CPU does, so it is the
// same bits.
//
//   cuda::Linear lin(gemm, &scratch);  // scratch: grow-only device buffer
//   RETURN_IF_ERROR(lin.Forward(x, w, bias, M, C, 3 * C, y, stream));
//   RETURN_IF_ERROR(lin.Backward(dy, x, w, M, C, 3 * C, dx, dw, dbias, stream));
//
// Device pointers; products on cuBLASLt through the shared GemmDesc (bias
// fused into the epilogue). Sizes must be positive, dy/dw non-null
// (INVALID_ARGUMENT, nothing enqueued).
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_LINEAR_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_LINEAR_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "common/device_scratch.h"
#include "model/kernels/cuda/gemm.h"
#include "model/kernels/cuda/op_timer.h"

namespace zeroshard::kernels::cuda {

// A dense row-major device tensor in FP32 or BF16.
struct DeviceTensor {
  const void* data = nullptr;
  DType dtype = DType::kFp32;
};

// dbias[j] += sum over rows i of dy[i, j]; dy [m, n], FP32. Summed in
// kColumnSumRows chunks (element_math.h), the CPU's order: the same bits.
absl::Status ColumnSumAccumulate(const float* dy, int64_t m, int64_t n,
                                 float* dbias, cudaStream_t stream);

class Linear {
 public:
  // Both must outlive the Linear.
  Linear(CublasLtGemm* gemm, DeviceScratch* dy_bf16)
      : gemm_(gemm), dy_bf16_(dy_bf16) {}

  // y[M,out] = x[M,in] W[in,out] + bias (bias may be null).
  absl::Status Forward(DeviceTensor x, DeviceTensor w, const float* bias,
                       int64_t m, int64_t in, int64_t out, float* y,
                       cudaStream_t stream);
  // dx = dy W^T (written; may be null), dw += x^T dy, dbias += colsum(dy)
  // (may be null).
  absl::Status Backward(const float* dy, DeviceTensor x, DeviceTensor w,
                        int64_t m, int64_t in, int64_t out, float* dx,
                        float* dw, float* dbias, cudaStream_t stream);

  // Marks its parts (products, dy's cast, the bias gradient) on `timer`
  // (null: none).
  void set_timer(OpTimer* timer) { timer_ = timer; }

 private:
  CublasLtGemm* gemm_;
  DeviceScratch* dy_bf16_;
  OpTimer* timer_ = nullptr;
};

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_LINEAR_H_
