#include "model/kernels/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

#ifndef ZS_CUDA_LIBRARY_DIR
#define ZS_CUDA_LIBRARY_DIR "/usr/local/cuda/lib64"
#endif

namespace zeroshard::kernels::cuda {
namespace {

absl::StatusOr<CublasLtApi> Load() {
  const std::string name = absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR);
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib == nullptr ? dlerror() : "";
  if (lib == nullptr) {
    const std::string path = absl::StrCat(ZS_CUDA_LIBRARY_DIR, "/", name);
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load ", name, " (cuBLASLt, for matrix products on the GPU): ",
        first_error, "; ", dlerror(),
        "; put the CUDA toolkit's library folder on LD_LIBRARY_PATH"));
  }
  CublasLtApi api{};
  std::string missing;
  auto get = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
        dlsym(lib, symbol));
    if (fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", symbol);
  };
  get(api.Create, "cublasLtCreate");
  get(api.Destroy, "cublasLtDestroy");
  get(api.GetStatusName, "cublasLtGetStatusName");
  get(api.GetStatusString, "cublasLtGetStatusString");
  get(api.Matmul, "cublasLtMatmul");
  get(api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  get(api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  get(api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  get(api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  get(api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  get(api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  get(api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  get(api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  get(api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  get(api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " lacks ", missing));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasLtApi*> LoadCublasLt() {
  // Loaded once; a failure is reported to every caller.
  static const absl::StatusOr<CublasLtApi>* const api =
      new absl::StatusOr<CublasLtApi>(Load());
  if (!api->ok()) return api->status();
  return &**api;
}

}  // namespace zeroshard::kernels::cuda
