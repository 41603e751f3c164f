#include "model/kernels/cuda/cross_entropy.h"

#include <math.h>

#include <cub/block/block_reduce.cuh>

#include "model/kernels/cuda/launch.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels::cuda {
namespace {

using BlockFloat = cub::BlockReduce<float, kThreads>;
using BlockDouble = cub::BlockReduce<double, kThreads>;

// One block per row. logits and dlogits may alias: every logit of the row is
// read (max, sum) before the first gradient element is written, and each
// element is then read and written by the same thread.
__global__ void CrossEntropyKernel(const float* logits,
                                   const int32_t* __restrict__ targets,
                                   int vocab, float scale_over_rows,
                                   double* __restrict__ row_loss,
                                   float* dlogits) {
  __shared__ BlockFloat::TempStorage tmp;
  __shared__ float shared_max, shared_sum;
  const int64_t row = blockIdx.x;
  const float* lr = logits + row * vocab;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) mx = fmaxf(mx, lr[v]);
  mx = BlockFloat(tmp).Reduce(mx, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) shared_max = mx;
  __syncthreads();
  mx = shared_max;
  float s = 0;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) s += expf(lr[v] - mx);
  s = BlockFloat(tmp).Sum(s);
  const int32_t t = targets[row];
  const bool valid = t >= 0 && t < vocab;
  if (threadIdx.x == 0) {
    shared_sum = s;
    row_loss[row] =
        valid ? static_cast<double>(CrossEntropyRowLoss(mx, s, lr[t])) : NAN;
  }
  __syncthreads();
  s = shared_sum;
  float* dr = dlogits + row * vocab;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    dr[v] = valid ? CrossEntropyGradElement(lr[v], mx, s, v == t,
                                            scale_over_rows)
                  : NAN;
  }
}

// One block: loss = sum(row_loss) / m, each thread's rows in order, then the
// block's tree: fixed for a given m.
__global__ void MeanKernel(const double* __restrict__ row_loss, int64_t m,
                           double* __restrict__ loss) {
  __shared__ BlockDouble::TempStorage tmp;
  double s = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) s += row_loss[i];
  s = BlockDouble(tmp).Sum(s);
  if (threadIdx.x == 0) *loss = s / static_cast<double>(m);
}

}  // namespace

absl::Status SoftmaxCrossEntropy(const float* logits, const int32_t* targets,
                                 int64_t m, int64_t vocab, float grad_scale,
                                 double* loss, float* dlogits,
                                 cudaStream_t stream) {
  const char* op = "cuda::SoftmaxCrossEntropy";
  if (m <= 0 || vocab <= 0 || m > (int64_t{1} << 31) - 1 ||
      vocab > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes must be positive (m < 2^31, vocab <= 2^30): m=", m,
        " vocab=", vocab));
  }
  if (absl::Status s =
          CheckElementwise(op, m * vocab, {logits, targets, loss, dlogits});
      !s.ok()) {
    return s;
  }
  double* row_loss = nullptr;
  if (absl::Status s = CudaStatus(
          cudaMallocAsync(reinterpret_cast<void**>(&row_loss),
                          sizeof(double) * static_cast<size_t>(m), stream),
          absl::StrCat(op, ": per-row losses"));
      !s.ok()) {
    return s;
  }
  const float scale = grad_scale / static_cast<float>(m);
  CrossEntropyKernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(
      logits, targets, static_cast<int>(vocab), scale, row_loss, dlogits);
  const absl::Status rows = LaunchStatus(op);
  if (rows.ok()) MeanKernel<<<1, kThreads, 0, stream>>>(row_loss, m, loss);
  const absl::Status launched = rows.ok() ? LaunchStatus(op) : rows;
  const absl::Status freed = CudaStatus(cudaFreeAsync(row_loss, stream),
                                        absl::StrCat(op, ": per-row losses"));
  return launched.ok() ? freed : launched;
}

}  // namespace zeroshard::kernels::cuda
