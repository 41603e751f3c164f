#include "worker/kernels/cuda/gemm.h"

#include <cublasLt.h>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"

namespace zeroshard::kernels::cuda {
namespace {

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code =
      s == CUBLAS_STATUS_ALLOC_FAILED     ? absl::StatusCode::kResourceExhausted
      : s == CUBLAS_STATUS_INVALID_VALUE  ? absl::StatusCode::kInvalidArgument
      : s == CUBLAS_STATUS_NOT_SUPPORTED  ? absl::StatusCode::kUnimplemented
      : s == CUBLAS_STATUS_NOT_INITIALIZED ? absl::StatusCode::kFailedPrecondition
                                           : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat("cuBLASLt: ", what, ": ",
                                         cublasLtGetStatusName(s), " (",
                                         cublasLtGetStatusString(s), ")"));
}

cudaDataType_t LtType(DType d) {
  return d == DType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The descriptors of one call, destroyed on every path.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

absl::Status Layout(cublasLtMatrixLayout_t* out, const ColumnMajorOperand& o) {
  return LtStatus(cublasLtMatrixLayoutCreate(
                      out, LtType(o.dtype), static_cast<uint64_t>(o.rows),
                      static_cast<uint64_t>(o.cols), o.ld),
                  "operand layout");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(
    size_t workspace_bytes) {
  std::unique_ptr<CublasLtGemm> g(new CublasLtGemm());
  cublasLtHandle_t h = nullptr;
  RETURN_IF_ERROR(LtStatus(cublasLtCreate(&h), "creating the handle"));
  g->handle_ = h;
  if (workspace_bytes > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&g->workspace_, workspace_bytes),
                               "cuBLASLt workspace"));
    g->workspace_bytes_ = workspace_bytes;
  }
  return g;
}

CublasLtGemm::~CublasLtGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

absl::Status CublasLtGemm::Run(const GemmDesc& g, cudaStream_t stream) {
  RETURN_IF_ERROR(ValidateGemm(g));
  if (g.a.dtype != g.b.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemm on the device: A is ", DTypeName(g.a.dtype), " and B ",
        DTypeName(g.b.dtype), "; convert both to one dtype first "
        "(cuda::FloatsToBf16)"));
  }
  const ColumnMajorGemm cm = ToColumnMajor(g);
  Descriptors d;
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      "matmul descriptor"));
  const cublasOperation_t ta = cm.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = cm.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                     sizeof(ta)),
      "transa"));
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                     sizeof(tb)),
      "transb"));
  if (cm.bias != nullptr || cm.gelu) {
    const cublasLtEpilogue_t ep =
        cm.bias != nullptr
            ? (cm.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
            : CUBLASLT_EPILOGUE_GELU;
    RETURN_IF_ERROR(LtStatus(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                       sizeof(ep)),
        "epilogue"));
    if (cm.bias != nullptr) {
      RETURN_IF_ERROR(LtStatus(
          cublasLtMatmulDescSetAttribute(d.op,
                                         CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                         &cm.bias, sizeof(cm.bias)),
          "bias pointer"));
    }
  }
  RETURN_IF_ERROR(Layout(&d.a, cm.a));
  RETURN_IF_ERROR(Layout(&d.b, cm.b));
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, static_cast<uint64_t>(cm.m),
                                 static_cast<uint64_t>(cm.n), cm.ldc),
      "output layout"));
  RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&d.pref),
                           "preference"));
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulPreferenceSetAttribute(
          d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
          sizeof(workspace_bytes_)),
      "workspace preference"));
  auto* handle = static_cast<cublasLtHandle_t>(handle_);
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, d.pref,
                                     1, &result, &found),
      "choosing an algorithm"));
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k,
        " dtype ", DTypeName(g.a.dtype)));
  }
  const float alpha = 1.0f;
  return LtStatus(
      cublasLtMatmul(handle, d.op, &alpha, cm.a.data, d.a, cm.b.data, d.b,
                     &cm.beta, cm.c, d.c, cm.c, d.c, &result.algo, workspace_,
                     workspace_bytes_, stream),
      "matmul");
}

}  // namespace zeroshard::kernels::cuda
