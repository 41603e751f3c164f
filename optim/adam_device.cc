#include "optim/adam_device.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "optim/adam_device_kernel.h"

namespace zeroshard {
namespace {

struct Array {
  const char* name;
  const void* ptr;
  size_t bytes;
  size_t align;
};

absl::Status CheckDeviceVisible(const Array& a) {
  cudaPointerAttributes attr;
  const cudaError_t e = cudaPointerGetAttributes(&attr, a.ptr);
  if (e != cudaSuccess) {
    return CudaStatus(e, absl::StrCat("AdamUpdateDevice: reading the "
                                      "attributes of ", a.name));
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      return absl::OkStatus();
    case cudaMemoryTypeHost:
      // Pinned host memory: usable where the device maps it at the same
      // address (unified addressing, every 64-bit platform CUDA supports).
      if (attr.devicePointer == a.ptr) return absl::OkStatus();
      break;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "AdamUpdateDevice: ", a.name,
      " is not device-visible memory (allocate it with cudaMalloc or "
      "cudaHostAlloc)"));
}

}  // namespace

absl::Status AdamUpdateDevice(const AdamStep& step, GradView grad,
                              const AdamSlice& slice, cudaStream_t stream) {
  const size_t n = slice.n;
  if (n == 0) return absl::OkStatus();
  if (n > SIZE_MAX / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamUpdateDevice: n = ", n, " overflows the byte count"));
  }
  const size_t gsize = grad.bf16 ? 2 : 4;
  Array arrays[] = {
      {"the gradient", grad.data, n * gsize, gsize},
      {"master", slice.master, n * 4, 4},
      {"exp_avg", slice.exp_avg, n * 4, 4},
      {"exp_avg_sq", slice.exp_avg_sq, n * 4, 4},
      {"mirror", slice.mirror, n * 2, 2},
  };
  const int count = slice.mirror != nullptr ? 5 : 4;
  for (int i = 0; i < count; ++i) {
    const Array& a = arrays[i];
    if (a.ptr == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("AdamUpdateDevice: ", a.name, " is null (n = ", n, ")"));
    }
    if (reinterpret_cast<uintptr_t>(a.ptr) % a.align != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AdamUpdateDevice: ", a.name, " is not aligned to ", a.align, " B"));
    }
  }
  for (int i = 0; i < count; ++i) {
    for (int j = i + 1; j < count; ++j) {
      const auto a = reinterpret_cast<uintptr_t>(arrays[i].ptr);
      const auto b = reinterpret_cast<uintptr_t>(arrays[j].ptr);
      if (a < b + arrays[j].bytes && b < a + arrays[i].bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("AdamUpdateDevice: ", arrays[i].name, " and ",
                         arrays[j].name, " overlap"));
      }
    }
  }
  for (int i = 0; i < count; ++i) RETURN_IF_ERROR(CheckDeviceVisible(arrays[i]));
  const cudaError_t e = LaunchAdamDeviceKernel(
      AdamElementArgsOf(step),
      grad.bf16 ? nullptr : static_cast<const float*>(grad.data),
      grad.bf16 ? static_cast<const uint16_t*>(grad.data) : nullptr,
      slice.master, slice.exp_avg, slice.exp_avg_sq, slice.mirror, n, stream);
  return CudaStatus(e, "AdamUpdateDevice: launching the kernel");
}

}  // namespace zeroshard
