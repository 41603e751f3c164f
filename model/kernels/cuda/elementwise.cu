#include "model/kernels/cuda/elementwise.h"

#include "common/bf16_bits.h"
#include "model/kernels/cuda/launch.h"
#include "model/kernels/element_math.h"

namespace zeroshard::kernels::cuda {
namespace {

// The grid-stride loop every elementwise kernel runs.
#define ZS_FOR_EACH_ELEMENT(i, n)                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x +         \
                   threadIdx.x;                                            \
       i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// x and y (dy and dx below) may be the same array: each element is read and
// then written by one thread, so no __restrict__ on them.
__global__ void GeluForwardKernel(const float* x, float* y, int64_t n) {
  ZS_FOR_EACH_ELEMENT(i, n) y[i] = GeluForwardElement(x[i]);
}

__global__ void GeluBackwardKernel(const float* __restrict__ x,
                                   const float* dy, float* dx, int64_t n) {
  ZS_FOR_EACH_ELEMENT(i, n) dx[i] = GeluBackwardElement(x[i], dy[i]);
}

// out may alias a or b (an in-place residual add).
__global__ void ResidualKernel(const float* a, const float* b, float* out,
                               int64_t n) {
  ZS_FOR_EACH_ELEMENT(i, n) out[i] = a[i] + b[i];
}

__global__ void ToBf16Kernel(const float* __restrict__ in,
                             uint16_t* __restrict__ out, int64_t n) {
  ZS_FOR_EACH_ELEMENT(i, n) out[i] = FloatToBf16Bits(in[i]);
}

__global__ void FromBf16Kernel(const uint16_t* __restrict__ in,
                               float* __restrict__ out, int64_t n) {
  ZS_FOR_EACH_ELEMENT(i, n) out[i] = Bf16BitsToFloat(in[i]);
}

__global__ void AccumulateKernel(const float* __restrict__ src, float scale,
                                 float* __restrict__ dst, int64_t n) {
  ZS_FOR_EACH_ELEMENT(i, n) dst[i] += scale * src[i];
}

#undef ZS_FOR_EACH_ELEMENT

}  // namespace

absl::Status GeluForward(const float* x, float* y, int64_t n,
                         cudaStream_t stream) {
  if (absl::Status s = CheckElementwise("cuda::GeluForward", n, {x, y});
      !s.ok() || n == 0) {
    return s;
  }
  GeluForwardKernel<<<GridFor(n), kThreads, 0, stream>>>(x, y, n);
  return LaunchStatus("cuda::GeluForward");
}

absl::Status GeluBackward(const float* x, const float* dy, float* dx,
                          int64_t n, cudaStream_t stream) {
  if (absl::Status s = CheckElementwise("cuda::GeluBackward", n, {x, dy, dx});
      !s.ok() || n == 0) {
    return s;
  }
  GeluBackwardKernel<<<GridFor(n), kThreads, 0, stream>>>(x, dy, dx, n);
  return LaunchStatus("cuda::GeluBackward");
}

absl::Status ResidualForward(const float* a, const float* b, float* out,
                             int64_t n, cudaStream_t stream) {
  if (absl::Status s = CheckElementwise("cuda::ResidualForward", n, {a, b, out});
      !s.ok() || n == 0) {
    return s;
  }
  ResidualKernel<<<GridFor(n), kThreads, 0, stream>>>(a, b, out, n);
  return LaunchStatus("cuda::ResidualForward");
}

absl::Status FloatsToBf16(const float* in, uint16_t* out, int64_t n,
                          cudaStream_t stream) {
  if (absl::Status s = CheckElementwise("cuda::FloatsToBf16", n, {in, out});
      !s.ok() || n == 0) {
    return s;
  }
  ToBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(in, out, n);
  return LaunchStatus("cuda::FloatsToBf16");
}

absl::Status Bf16sToFloat(const uint16_t* in, float* out, int64_t n,
                          cudaStream_t stream) {
  if (absl::Status s = CheckElementwise("cuda::Bf16sToFloat", n, {in, out});
      !s.ok() || n == 0) {
    return s;
  }
  FromBf16Kernel<<<GridFor(n), kThreads, 0, stream>>>(in, out, n);
  return LaunchStatus("cuda::Bf16sToFloat");
}

absl::Status AccumulateScaled(const float* src, float scale, float* dst,
                              int64_t n, cudaStream_t stream) {
  if (absl::Status s = CheckElementwise("cuda::AccumulateScaled", n, {src, dst});
      !s.ok() || n == 0) {
    return s;
  }
  AccumulateKernel<<<GridFor(n), kThreads, 0, stream>>>(src, scale, dst, n);
  return LaunchStatus("cuda::AccumulateScaled");
}

}  // namespace zeroshard::kernels::cuda
