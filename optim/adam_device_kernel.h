// Internal to optim/: the launcher of the device AdamW kernel, free of absl so
// that nvcc compiles adam_device_kernel.cu without it. Call AdamUpdateDevice
// (adam_device.h), which validates and turns the error into a Status.
#ifndef ZEROSHARD_OPTIM_ADAM_DEVICE_KERNEL_H_
#define ZEROSHARD_OPTIM_ADAM_DEVICE_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "optim/adam_element.h"

namespace zeroshard {

// Enqueues the update of n elements on `stream`: exactly one of grad_f32 and
// grad_bf16 is non-null; mirror may be null. Every pointer is device-visible.
// Returns the launch error (cudaSuccess when queued).
cudaError_t LaunchAdamDeviceKernel(const AdamElementArgs& args,
                                   const float* grad_f32,
                                   const uint16_t* grad_bf16, float* master,
                                   float* exp_avg, float* exp_avg_sq,
                                   uint16_t* mirror, size_t n,
                                   cudaStream_t stream);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAM_DEVICE_KERNEL_H_
