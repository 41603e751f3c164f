// cuBLASLt, loaded when first needed (dlopen) rather than linked: the
// library is over 500 MB and mapping it costs a process about 200 MB of
// resident memory at start, which every CPU-only zeroshard-worker would pay
// (integration_estimate_test measures workers' peak RSS). Only a worker that
// computes on a GPU loads it.
//
//   ASSIGN_OR_RETURN(const CublasLtApi* lt, LoadCublasLt());
//   lt->Create(&handle);
//
// Searched as libcublasLt.so.<major of the headers built against> on the
// loader's path (the executable's run path, LD_LIBRARY_PATH), then in the
// toolkit's library folder this build was configured with. Thread-safe; the
// library stays loaded for the process's life.
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_CUBLASLT_API_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_CUBLASLT_API_H_

#include <cublasLt.h>

#include "absl/status/statusor.h"

namespace zeroshard::kernels::cuda {

struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtGetStatusName) GetStatusName;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

// The loaded API, or FAILED_PRECONDITION naming the library and dlerror().
absl::StatusOr<const CublasLtApi*> LoadCublasLt();

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_CUBLASLT_API_H_
