// A CUDA runtime error as an absl::Status (CUDA builds only: it includes
// cuda_runtime_api.h, so only sources that CMake builds with CUDA include it;
// the Bazel build leaves it out of common's headers).
//
//   RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(...), "copying the gradient"));
//
// Out of memory is RESOURCE_EXHAUSTED, a bad argument INVALID_ARGUMENT, no
// device or driver FAILED_PRECONDITION, anything else INTERNAL; the message
// names what was being done and the CUDA error.
#ifndef ZEROSHARD_COMMON_CUDA_STATUS_H_
#define ZEROSHARD_COMMON_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

inline absl::StatusCode CudaErrorCode(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

inline absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::Status(CudaErrorCode(e),
                      absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                   cudaGetErrorString(e), ")"));
}

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CUDA_STATUS_H_
