#include "model/kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "model/kernels/cuda/cublaslt_api.h"

namespace zeroshard::kernels::cuda {
namespace {

// The loaded library (Create succeeded before any other call runs).
const CublasLtApi& Lt() { return **LoadCublasLt(); }

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code =
      s == CUBLAS_STATUS_ALLOC_FAILED     ? absl::StatusCode::kResourceExhausted
      : s == CUBLAS_STATUS_INVALID_VALUE  ? absl::StatusCode::kInvalidArgument
      : s == CUBLAS_STATUS_NOT_SUPPORTED  ? absl::StatusCode::kUnimplemented
      : s == CUBLAS_STATUS_NOT_INITIALIZED ? absl::StatusCode::kFailedPrecondition
                                           : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat("cuBLASLt: ", what, ": ",
                                         Lt().GetStatusName(s), " (",
                                         Lt().GetStatusString(s), ")"));
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
    if (pref != nullptr) Lt().MatmulPreferenceDestroy(pref);
    if (c != nullptr) Lt().MatrixLayoutDestroy(c);
    if (b != nullptr) Lt().MatrixLayoutDestroy(b);
    if (a != nullptr) Lt().MatrixLayoutDestroy(a);
    if (op != nullptr) Lt().MatmulDescDestroy(op);
  }
};

// The alignment cuBLASLt may assume for an operand: the largest power of two
// (at most 256, its default assumption) dividing its address and, in a
// batch, its stride in bytes. Without it the heuristic may pick an
// algorithm that needs 256-byte alignment, which strided per-head operands
// do not have.
uint32_t Alignment(const void* p, int64_t stride_bytes, int64_t batch) {
  uint64_t a = reinterpret_cast<uintptr_t>(p) | 256;
  if (batch > 1 && stride_bytes > 0) a |= static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(a & (~a + 1));  // lowest set bit
}

// A strided batch on a layout (batch > 1): the count and the element stride.
absl::Status Batch(cublasLtMatrixLayout_t layout, int64_t batch,
                   int64_t stride) {
  if (batch <= 1) return absl::OkStatus();
  const int32_t count = static_cast<int32_t>(batch);
  RETURN_IF_ERROR(LtStatus(
      Lt().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                    &count, sizeof(count)),
      "batch count"));
  return LtStatus(Lt().MatrixLayoutSetAttribute(
                      layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                      &stride, sizeof(stride)),
                  "batch stride");
}

absl::Status Layout(cublasLtMatrixLayout_t* out, const ColumnMajorOperand& o,
                    int64_t batch, int64_t stride) {
  RETURN_IF_ERROR(LtStatus(Lt().MatrixLayoutCreate(
                               out, LtType(o.dtype), static_cast<uint64_t>(o.rows),
                               static_cast<uint64_t>(o.cols), o.ld),
                           "operand layout"));
  return Batch(*out, batch, stride);
}

}  // namespace

// One product shape's descriptors and chosen algorithm, built on its first
// call and reused: building them and asking the heuristic costs tens of
// microseconds, as long as a small product takes on the device.
struct CublasLtGemm::Plan {
  Descriptors d;
  cublasLtMatmulAlgo_t algo;
};

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(
    size_t workspace_bytes) {
  ASSIGN_OR_RETURN(const CublasLtApi* lt, LoadCublasLt());
  std::unique_ptr<CublasLtGemm> g(new CublasLtGemm());
  cublasLtHandle_t h = nullptr;
  RETURN_IF_ERROR(LtStatus(lt->Create(&h), "creating the handle"));
  g->handle_ = h;
  if (workspace_bytes > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&g->workspace_, workspace_bytes),
                               "cuBLASLt workspace"));
    g->workspace_bytes_ = workspace_bytes;
  }
  return g;
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();  // their descriptors before the handle
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) Lt().Destroy(static_cast<cublasLtHandle_t>(handle_));
}

absl::StatusOr<CublasLtGemm::Plan*> CublasLtGemm::PlanFor(
    const GemmDesc& g, const ColumnMajorGemm& cm) {
  const int64_t ea = static_cast<int64_t>(DTypeSize(cm.a.dtype));
  const int64_t eb = static_cast<int64_t>(DTypeSize(cm.b.dtype));
  const uint32_t align[4] = {
      Alignment(cm.a.data, cm.stride_a * ea, cm.batch),
      Alignment(cm.b.data, cm.stride_b * eb, cm.batch),
      Alignment(cm.c, cm.stride_c * 4, cm.batch),
      Alignment(cm.c, cm.stride_c * 4, cm.batch)};
  const int epilogue = (cm.bias != nullptr ? 1 : 0) + (cm.gelu ? 2 : 0);
  // Everything the descriptors and the algorithm depend on (not the
  // pointers, beyond their alignment; the bias pointer is set per call).
  std::string key = absl::StrCat(
      cm.m, ",", cm.n, ",", cm.k, ",", static_cast<int>(cm.a.dtype), ",",
      cm.a.trans, ",", cm.a.ld, ",", cm.a.rows, ",", cm.a.cols, ",",
      cm.b.trans, ",", cm.b.ld, ",", cm.b.rows, ",", cm.b.cols, ",", cm.ldc,
      ",", cm.batch, ",", cm.stride_a, ",", cm.stride_b, ",", cm.stride_c,
      ",", epilogue, ",", align[0], ",", align[1], ",", align[2]);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  Descriptors& d = plan->d;
  RETURN_IF_ERROR(LtStatus(
      Lt().MatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      "matmul descriptor"));
  const cublasOperation_t ta = cm.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = cm.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  RETURN_IF_ERROR(LtStatus(
      Lt().MatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                  sizeof(ta)),
      "transa"));
  RETURN_IF_ERROR(LtStatus(
      Lt().MatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                  sizeof(tb)),
      "transb"));
  if (epilogue != 0) {
    const cublasLtEpilogue_t ep =
        cm.bias != nullptr
            ? (cm.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
            : CUBLASLT_EPILOGUE_GELU;
    RETURN_IF_ERROR(LtStatus(
        Lt().MatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                    sizeof(ep)),
        "epilogue"));
  }
  if (cm.bias != nullptr) {
    // The heuristic wants a bias pointer to plan with; each call sets its own.
    RETURN_IF_ERROR(LtStatus(
        Lt().MatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                    &cm.bias, sizeof(cm.bias)),
        "bias pointer"));
  }
  if (g.batch > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemm on the device: batch ", g.batch, " > 2^31 - 1"));
  }
  RETURN_IF_ERROR(Layout(&d.a, cm.a, cm.batch, cm.stride_a));
  RETURN_IF_ERROR(Layout(&d.b, cm.b, cm.batch, cm.stride_b));
  RETURN_IF_ERROR(LtStatus(
      Lt().MatrixLayoutCreate(&d.c, CUDA_R_32F, static_cast<uint64_t>(cm.m),
                              static_cast<uint64_t>(cm.n), cm.ldc),
      "output layout"));
  RETURN_IF_ERROR(Batch(d.c, cm.batch, cm.stride_c));
  RETURN_IF_ERROR(LtStatus(Lt().MatmulPreferenceCreate(&d.pref), "preference"));
  RETURN_IF_ERROR(LtStatus(
      Lt().MatmulPreferenceSetAttribute(
          d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
          sizeof(workspace_bytes_)),
      "workspace preference"));
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    RETURN_IF_ERROR(LtStatus(
        Lt().MatmulPreferenceSetAttribute(d.pref, align_attr[i], &align[i],
                                          sizeof(align[i])),
        "alignment preference"));
  }
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  RETURN_IF_ERROR(LtStatus(
      Lt().MatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), d.op,
                                  d.a, d.b, d.c, d.c, d.pref, 1, &result,
                                  &found),
      "choosing an algorithm"));
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k,
        " dtype ", DTypeName(g.a.dtype)));
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(std::move(key), std::move(plan));
  return raw;
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
  ASSIGN_OR_RETURN(Plan * plan, PlanFor(g, cm));
  if (cm.bias != nullptr) {
    RETURN_IF_ERROR(LtStatus(
        Lt().MatmulDescSetAttribute(plan->d.op,
                                    CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                    &cm.bias, sizeof(cm.bias)),
        "bias pointer"));
  }
  const float alpha = 1.0f;
  return LtStatus(
      Lt().Matmul(static_cast<cublasLtHandle_t>(handle_), plan->d.op, &alpha,
                  cm.a.data, plan->d.a, cm.b.data, plan->d.b, &cm.beta, cm.c,
                  plan->d.c, cm.c, plan->d.c, &plan->algo, workspace_,
                  workspace_bytes_, stream),
      "matmul");
}

}  // namespace zeroshard::kernels::cuda
