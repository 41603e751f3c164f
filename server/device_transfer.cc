#include "server/device_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

#if ZS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "optim/adam_device.h"
#endif

namespace zeroshard {
namespace {

std::atomic<int> g_state_device{0};

#if ZS_HAVE_CUDA

// Copies go through pinned staging in pieces of at most this many bytes, so
// a thread's staging buffer stays small while whole chunks stream through.
constexpr size_t kStagingBytes = size_t{8} << 20;

// The calling thread's stream and buffers on the state device. Freed at
// thread exit (errors then are ignored: the process may be tearing CUDA
// down).
struct ThreadDeviceContext {
  int device = -1;
  cudaStream_t stream = nullptr;
  void* staging = nullptr;  // pinned host, kStagingBytes
  void* grad = nullptr;     // device, grad_bytes
  size_t grad_bytes = 0;

  ~ThreadDeviceContext() { Release(); }
  void Release() {
    if (device < 0) return;
    cudaSetDevice(device);
    if (grad != nullptr) cudaFree(grad);
    if (staging != nullptr) cudaFreeHost(staging);
    if (stream != nullptr) cudaStreamDestroy(stream);
    grad = staging = nullptr;
    stream = nullptr;
    grad_bytes = 0;
    device = -1;
  }
};

absl::StatusOr<ThreadDeviceContext*> Context() {
  thread_local ThreadDeviceContext ctx;
  const int want = g_state_device.load(std::memory_order_relaxed);
  if (ctx.device != want) {
    ctx.Release();  // selects the old device to free its resources
    // Built into locals and committed only whole: a failure leaves the
    // context empty, to be built again by the next call.
    RETURN_IF_ERROR(
        CudaStatus(cudaSetDevice(want), "selecting the state device"));
    cudaStream_t stream = nullptr;
    void* staging = nullptr;
    RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        "creating a state stream"));
    const cudaError_t e =
        cudaHostAlloc(&staging, kStagingBytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaStreamDestroy(stream);
      return CudaStatus(e, "allocating pinned staging for the device state");
    }
    ctx.stream = stream;
    ctx.staging = staging;
    ctx.device = want;
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(want), "selecting the state device"));
  return &ctx;
}

absl::Status Sync(ThreadDeviceContext* ctx, const char* what) {
  return CudaStatus(cudaStreamSynchronize(ctx->stream), what);
}

#endif  // ZS_HAVE_CUDA

[[maybe_unused]] absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "--placement=device needs CUDA, and this zeroshard-server was built "
      "without it; use --placement=host");
}

}  // namespace

absl::Status SelectStateDevice(int ordinal) {
  if (ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_device=", ordinal, " is negative"));
  }
#if ZS_HAVE_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--cuda_device=", ordinal, " names no usable CUDA device (",
        e != cudaSuccess ? cudaGetErrorString(e)
                         : absl::StrCat(count, " devices").c_str(),
        ")"));
  }
  g_state_device.store(ordinal, std::memory_order_relaxed);
  return absl::OkStatus();
#else
  if (ordinal != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--cuda_device=", ordinal,
        ": this zeroshard-server was built without CUDA; use "
        "--placement=host"));
  }
  return absl::OkStatus();
#endif
}

int StateDevice() { return g_state_device.load(std::memory_order_relaxed); }

absl::Status CopyHostToDevice(void* device_dst, const void* host_src,
                              size_t bytes) {
#if ZS_HAVE_CUDA
  if (bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(ThreadDeviceContext * ctx, Context());
  auto* dst = static_cast<char*>(device_dst);
  const auto* src = static_cast<const char*>(host_src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    // The previous piece's copy must have left the staging buffer.
    RETURN_IF_ERROR(Sync(ctx, "copying state to the device"));
    std::memcpy(ctx->staging, src + done, n);
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst + done, ctx->staging, n, cudaMemcpyHostToDevice,
                        ctx->stream),
        "copying state to the device"));
    done += n;
  }
  return Sync(ctx, "copying state to the device");
#else
  (void)device_dst, (void)host_src, (void)bytes;
  return NoCuda();
#endif
}

absl::Status CopyDeviceToHost(void* host_dst, const void* device_src,
                              size_t bytes) {
#if ZS_HAVE_CUDA
  if (bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(ThreadDeviceContext * ctx, Context());
  auto* dst = static_cast<char*>(host_dst);
  const auto* src = static_cast<const char*>(device_src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(ctx->staging, src + done, n, cudaMemcpyDeviceToHost,
                        ctx->stream),
        "copying state from the device"));
    RETURN_IF_ERROR(Sync(ctx, "copying state from the device"));
    std::memcpy(dst + done, ctx->staging, n);
    done += n;
  }
  return absl::OkStatus();
#else
  (void)host_dst, (void)device_src, (void)bytes;
  return NoCuda();
#endif
}

absl::Status ZeroDevice(void* device_dst, size_t bytes) {
#if ZS_HAVE_CUDA
  if (bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(ThreadDeviceContext * ctx, Context());
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(device_dst, 0, bytes, ctx->stream),
                             "zeroing device state"));
  return Sync(ctx, "zeroing device state");
#else
  (void)device_dst, (void)bytes;
  return NoCuda();
#endif
}

absl::Status AdamUpdateFromHost(const AdamStep& step, GradView grad,
                                const AdamSlice& slice) {
#if ZS_HAVE_CUDA
  if (slice.n == 0) return absl::OkStatus();
  if (grad.data == nullptr) {
    return absl::InvalidArgumentError("AdamUpdateFromHost: null gradient");
  }
  ASSIGN_OR_RETURN(ThreadDeviceContext * ctx, Context());
  const size_t bytes = slice.n * (grad.bf16 ? 2 : 4);
  if (ctx->grad_bytes < bytes) {
    if (ctx->grad != nullptr) {
      RETURN_IF_ERROR(Sync(ctx, "growing the device gradient buffer"));
      cudaFree(ctx->grad);
      ctx->grad = nullptr;
      ctx->grad_bytes = 0;
    }
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ctx->grad, bytes),
                               "allocating the device gradient buffer"));
    ctx->grad_bytes = bytes;
  }
  RETURN_IF_ERROR(CopyHostToDevice(ctx->grad, grad.data, bytes));
  const GradView device_grad{ctx->grad, grad.bf16};
  RETURN_IF_ERROR(AdamUpdateDevice(step, device_grad, slice, ctx->stream));
  return Sync(ctx, "AdamW on the device");
#else
  (void)step, (void)grad, (void)slice;
  return NoCuda();
#endif
}

}  // namespace zeroshard
