// The gradients' sum of squares and non-finite count on a CUDA device, in one
// pass (cub::DeviceReduce::TransformReduce): what the global-norm clip and
// the FP16 overflow check read (common/grad_clip.h). The per-element terms
// are model/kernels/element_math.h's SquareTerm / IsFiniteElement, summed in
// double, as GradNormTermsTwin sums them.
//
//   GradNormTerms* d_terms;  // device memory
//   RETURN_IF_ERROR(cuda::ReduceGradNormTerms(d_grad, n, d_terms, stream));
#ifndef ZEROSHARD_MODEL_KERNELS_CUDA_GRAD_NORM_H_
#define ZEROSHARD_MODEL_KERNELS_CUDA_GRAD_NORM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace zeroshard::kernels::cuda {

struct GradNormTerms {
  double sum_sq = 0;           // sum of g^2 (NaN / Inf when any g is)
  long long non_finite = 0;    // how many g are NaN or infinite
};

// Writes *terms (device memory) once the stream reaches it; n == 0 writes
// zeros. Scratch comes from the stream-ordered allocator.
absl::Status ReduceGradNormTerms(const float* g, int64_t n,
                                 GradNormTerms* terms, cudaStream_t stream);

}  // namespace zeroshard::kernels::cuda

#endif  // ZEROSHARD_MODEL_KERNELS_CUDA_GRAD_NORM_H_
