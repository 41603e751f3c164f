#include "model/kernels/cuda/grad_norm.h"

#include <cub/device/device_reduce.cuh>

#include "model/kernels/cuda/launch.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels::cuda {
namespace {

struct ToTerms {
  __host__ __device__ GradNormTerms operator()(float g) const {
    GradNormTerms t;
    t.sum_sq = SquareTerm(g);
    t.non_finite = IsFiniteElement(g) ? 0 : 1;
    return t;
  }
};

struct AddTerms {
  __host__ __device__ GradNormTerms operator()(const GradNormTerms& a,
                                               const GradNormTerms& b) const {
    GradNormTerms t;
    t.sum_sq = a.sum_sq + b.sum_sq;
    t.non_finite = a.non_finite + b.non_finite;
    return t;
  }
};

}  // namespace

absl::Status ReduceGradNormTerms(const float* g, int64_t n,
                                 GradNormTerms* terms, cudaStream_t stream) {
  const char* op = "cuda::ReduceGradNormTerms";
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": n must not be negative (n=", n, ")"));
  }
  if (terms == nullptr || (n > 0 && g == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer"));
  }
  if (n == 0) {
    return CudaStatus(
        cudaMemsetAsync(terms, 0, sizeof(GradNormTerms), stream), op);
  }
  size_t temp_bytes = 0;
  RETURN_IF_ERROR(CudaStatus(
      cub::DeviceReduce::TransformReduce(nullptr, temp_bytes, g, terms, n,
                                         AddTerms{}, ToTerms{},
                                         GradNormTerms{}, stream),
      absl::StrCat(op, ": sizing the scratch")));
  void* temp = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&temp, temp_bytes, stream),
                             absl::StrCat(op, ": scratch of ", temp_bytes, " B")));
  const absl::Status reduced = CudaStatus(
      cub::DeviceReduce::TransformReduce(temp, temp_bytes, g, terms, n,
                                         AddTerms{}, ToTerms{},
                                         GradNormTerms{}, stream),
      op);
  const absl::Status freed =
      CudaStatus(cudaFreeAsync(temp, stream), absl::StrCat(op, ": scratch"));
  return reduced.ok() ? freed : reduced;
}

}  // namespace zeroshard::kernels::cuda
