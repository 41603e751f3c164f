// Matrix products on a CUDA device through cuBLASLt: the shared descriptor
// (model/kernels/gemm_desc.h) executed in BF16 (or FP32) with FP32
// accumulation and an FP32 output, bias and GELU fused into cuBLASLt's
// epilogue. ToColumnMajor supplies the layouts, the same code the CPU tests
// check.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<CublasLtGemm> lt, CublasLtGemm::Create());
//   RETURN_IF_ERROR(lt->Run(desc, stream));   // device pointers in desc
//
// A and B must have the same dtype here (the CPU path rounds a mixed FP32
// operand to BF16 itself; on the device the worker keeps both in BF16):
// mixed dtypes are INVALID_ARGUMENT. Each product shape's descriptors and
// algorithm (cuBLASLt's first heuristic choice, told the operands' real
// alignment) are built on its first call and cached. Not thread-safe: one
// CublasLtGemm per thread and device.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_GEMM_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/kernels/gemm_desc.h"

namespace zeroshard::kernels::cuda {

class CublasLtGemm {
 public:
  // A handle on the current device and a workspace of workspace_bytes.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(
      size_t workspace_bytes = size_t{32} << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Validates (ValidateGemm, same dtypes), takes the shape's cached plan (or
  // builds it) and enqueues the product on `stream`.
  absl::Status Run(const GemmDesc& g, cudaStream_t stream);

 private:
  struct Plan;  // one shape's descriptors and algorithm (gemm.cc)
  CublasLtGemm() = default;
  absl::StatusOr<Plan*> PlanFor(const GemmDesc& g, const ColumnMajorGemm& cm);

  std::unordered_map<std::string, std::unique_ptr<Plan>> plans_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_GEMM_H_
