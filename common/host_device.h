// ZS_HOST_DEVICE marks a function that runs on the host and on a CUDA device.
//
// The per-element and per-row arithmetic of the kernels is written once, in
// headers, as ZS_HOST_DEVICE inline functions: nvcc compiles them into the
// device kernels (model/kernels/cuda, optim/adam_device_kernel.cu), and the
// host compiler into the CPU twins the tests compare those kernels with, so
// the CPU tests exercise the exact formulas the device runs. Without nvcc the
// macro is empty and the headers are plain C++ (the Bazel build, the
// sanitizer builds).
//
//   ZS_HOST_DEVICE inline float Twice(float x) { return 2.0f * x; }
#ifndef ZEROSHARD_COMMON_HOST_DEVICE_H_
#define ZEROSHARD_COMMON_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define ZS_HOST_DEVICE __host__ __device__
#else
#define ZS_HOST_DEVICE
#endif

#endif  // ZEROSHARD_COMMON_HOST_DEVICE_H_
