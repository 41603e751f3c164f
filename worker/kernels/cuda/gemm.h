// Matrix products on a CUDA device through cuBLASLt: the shared descriptor
// (worker/kernels/gemm_desc.h) executed in BF16 (or FP32) with FP32
// accumulation and an FP32 output, bias and GELU fused into cuBLASLt's
// epilogue. ToColumnMajor supplies the layouts, the same code the CPU tests
// check.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CublasLtGemm> lt, CublasLtGemm::Create());
//   RETURN_IF_ERROR(lt->Run(desc, stream));   // device pointers in desc
//
// A and B must have the same dtype here (the CPU path rounds a mixed FP32
// operand to BF16 itself; on the device the worker keeps both in BF16):
// mixed dtypes are INVALID_ARGUMENT. One CublasLtGemm per thread and device
// (the handle is thread-safe, its workspace is not shared across concurrent
// streams).
#ifndef ZEROSHARD_WORKER_KERNELS_CUDA_GEMM_H_
#define ZEROSHARD_WORKER_KERNELS_CUDA_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/kernels/gemm_desc.h"

namespace zeroshard::kernels::cuda {

class CublasLtGemm {
 public:
  // A handle on the current device and a workspace of workspace_bytes.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(
      size_t workspace_bytes = size_t{32} << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Validates (ValidateGemm, same dtypes), picks cuBLASLt's first heuristic
  // algorithm for the shape and enqueues the product on `stream`.
  absl::Status Run(const GemmDesc& g, cudaStream_t stream);

 private:
  CublasLtGemm() = default;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_WORKER_KERNELS_CUDA_GEMM_H_
