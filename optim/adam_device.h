// AdamW on a CUDA device: the server's update when its state lives in device
// memory (or in pinned host memory the device maps).
//
// Same contract as AdamUpdateReference (optimizer.h) with every array
// device-visible: device memory, managed memory, or pinned host memory
// (cudaHostAlloc; the device reads it over the bus). The kernel applies
// AdamElement (adam_element.h), the reference's own per-element function, so
// results equal AdamUpdateReference's bit for bit (tests/optim/
// adam_device_test.cc compares them on a GPU). Enqueued on `stream`;
// the arrays must stay valid until the stream reaches it.
//
//   RETURN_IF_ERROR(AdamUpdateDevice(step, GradView::Fp32(d_grad),
//                                    {d_master, d_m, d_v, d_mirror, n}, s));
//   RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s), "AdamW"));
//
// Built only where CUDA is (CMake with nvcc); the CUDA-free builds have no
// device placement.
#ifndef ZEROSHARD_OPTIM_ADAM_DEVICE_H_
#define ZEROSHARD_OPTIM_ADAM_DEVICE_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "optim/optimizer.h"

namespace zeroshard {

// Validates before touching memory: a null array (the mirror may be null),
// a misaligned one (4 B; 2 B for BF16 gradients and the mirror), one the
// device cannot see (plain pageable host memory), or arrays that overlap are
// INVALID_ARGUMENT naming the array; a launch failure is the CUDA error
// (common/cuda_status.h). n == 0 does nothing.
absl::Status AdamUpdateDevice(const AdamStep& step, GradView grad,
                              const AdamSlice& slice, cudaStream_t stream);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAM_DEVICE_H_
