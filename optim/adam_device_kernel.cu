// The device AdamW kernel: AdamElement (adam_element.h) per element, in a
// grid-stride loop. Built with --fmad=false (optim/CMakeLists.txt) so that
// its results equal AdamUpdateReference's bit for bit.
#include "optim/adam_device_kernel.h"

#include "common/bf16_bits.h"

namespace zeroshard {
namespace {

constexpr int kThreads = 256;

// One thread per element and pass: reads g, p, m, v once and writes p, m, v
// (and the mirror) once, 16 B read + 12 B written per FP32 element (+2 B
// mirror): the kernel is bound by memory bandwidth.
__global__ void AdamKernel(AdamElementArgs args, const float* __restrict__ g32,
                           const uint16_t* __restrict__ g16,
                           float* __restrict__ master,
                           float* __restrict__ exp_avg,
                           float* __restrict__ exp_avg_sq,
                           uint16_t* __restrict__ mirror, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float g = g16 != nullptr ? Bf16BitsToFloat(g16[i]) : g32[i];
    float p = master[i], m = exp_avg[i], v = exp_avg_sq[i];
    AdamElement(args, g, p, m, v);
    master[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (mirror != nullptr) mirror[i] = FloatToBf16Bits(p);
  }
}

}  // namespace

cudaError_t LaunchAdamDeviceKernel(const AdamElementArgs& args,
                                   const float* grad_f32,
                                   const uint16_t* grad_bf16, float* master,
                                   float* exp_avg, float* exp_avg_sq,
                                   uint16_t* mirror, size_t n,
                                   cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  // Enough blocks to fill any current device several times over; the loop
  // covers the rest.
  const size_t want = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(want < 65536 ? want : 65536);
  AdamKernel<<<blocks, kThreads, 0, stream>>>(args, grad_f32, grad_bf16, master,
                                              exp_avg, exp_avg_sq, mirror, n);
  return cudaGetLastError();
}

}  // namespace zeroshard
