#include "server/device_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

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

// A stream and buffers on the state device, lent to one call at a time.
// Freed at process exit (errors then are ignored: the process may be
// tearing CUDA down).
struct DeviceContext {
  int device = -1;
  cudaStream_t stream = nullptr;
  void* staging = nullptr;  // pinned host, kStagingBytes
  void* grad = nullptr;     // device, grad_bytes
  size_t grad_bytes = 0;

  ~DeviceContext() { Release(); }
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
  // (Re)built for `want` unless it is on it already: built into locals and
  // committed only whole, so a failure leaves the context empty, to be
  // built again by the next call.
  absl::Status Ensure(int want) {
    if (device != want) {
      Release();  // selects the old device to free its resources
      RETURN_IF_ERROR(
          CudaStatus(cudaSetDevice(want), "selecting the state device"));
      cudaStream_t s = nullptr;
      void* p = nullptr;
      RETURN_IF_ERROR(
          CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                     "creating a state stream"));
      const cudaError_t e = cudaHostAlloc(&p, kStagingBytes, cudaHostAllocDefault);
      if (e != cudaSuccess) {
        cudaStreamDestroy(s);
        return CudaStatus(e, "allocating pinned staging for the device state");
      }
      stream = s;
      staging = p;
      device = want;
    }
    return CudaStatus(cudaSetDevice(want), "selecting the state device");
  }
};

// At most this many contexts exist (one per core, at least 4): the gRPC and
// optimizer-pool threads that copy and update at once share them, and a
// caller waits for a free one, so the pinned staging and device gradient
// buffers stay bounded however many threads the server runs.
size_t MaxContexts() {
  return std::max<size_t>(4, std::thread::hardware_concurrency());
}

class ContextPool {
 public:
  DeviceContext* Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](ContextPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
          return !p->free_.empty() || p->all_.size() < MaxContexts();
        },
        this));
    if (free_.empty()) {
      all_.push_back(std::make_unique<DeviceContext>());
      return all_.back().get();
    }
    DeviceContext* c = free_.back();
    free_.pop_back();
    return c;
  }
  void Return(DeviceContext* c) {
    absl::MutexLock lock(&mu_);
    free_.push_back(c);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<DeviceContext>> all_ ABSL_GUARDED_BY(mu_);
  std::vector<DeviceContext*> free_ ABSL_GUARDED_BY(mu_);
};

ContextPool& Pool() {
  static auto* pool = new ContextPool();  // outlives every caller
  return *pool;
}

// One call's context, on the selected state device; returned to the pool
// when the lease ends.
class ContextLease {
 public:
  ContextLease() : ctx_(Pool().Acquire()) {}
  ~ContextLease() { Pool().Return(ctx_); }
  ContextLease(const ContextLease&) = delete;
  ContextLease& operator=(const ContextLease&) = delete;
  absl::StatusOr<DeviceContext*> Get() {
    RETURN_IF_ERROR(
        ctx_->Ensure(g_state_device.load(std::memory_order_relaxed)));
    return ctx_;
  }

 private:
  DeviceContext* const ctx_;
};

absl::Status Sync(DeviceContext* ctx, const char* what) {
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

#if ZS_HAVE_CUDA
namespace {

absl::Status HostToDevice(DeviceContext* ctx, void* device_dst,
                          const void* host_src, size_t bytes) {
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
}

absl::Status DeviceToHost(DeviceContext* ctx, void* host_dst,
                          const void* device_src, size_t bytes) {
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
}

}  // namespace
#endif  // ZS_HAVE_CUDA

absl::Status CopyHostToDevice(void* device_dst, const void* host_src,
                              size_t bytes) {
#if ZS_HAVE_CUDA
  if (bytes == 0) return absl::OkStatus();
  ContextLease lease;
  ASSIGN_OR_RETURN(DeviceContext * ctx, lease.Get());
  return HostToDevice(ctx, device_dst, host_src, bytes);
#else
  (void)device_dst, (void)host_src, (void)bytes;
  return NoCuda();
#endif
}

absl::Status CopyDeviceToHost(void* host_dst, const void* device_src,
                              size_t bytes) {
#if ZS_HAVE_CUDA
  if (bytes == 0) return absl::OkStatus();
  ContextLease lease;
  ASSIGN_OR_RETURN(DeviceContext * ctx, lease.Get());
  return DeviceToHost(ctx, host_dst, device_src, bytes);
#else
  (void)host_dst, (void)device_src, (void)bytes;
  return NoCuda();
#endif
}

absl::Status ZeroDevice(void* device_dst, size_t bytes) {
#if ZS_HAVE_CUDA
  if (bytes == 0) return absl::OkStatus();
  ContextLease lease;
  ASSIGN_OR_RETURN(DeviceContext * ctx, lease.Get());
  RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(device_dst, 0, bytes, ctx->stream),
                             "zeroing device state"));
  return Sync(ctx, "zeroing device state");
#else
  (void)device_dst, (void)bytes;
  return NoCuda();
#endif
}

absl::Status UpdateFromHost(const UpdateRule& rule, const AdamStep& step,
                            GradView grad, const StateSlice& slice) {
#if ZS_HAVE_CUDA
  if (slice.n == 0) return absl::OkStatus();
  if (grad.data == nullptr) {
    return absl::InvalidArgumentError("UpdateFromHost: null gradient");
  }
  ContextLease lease;
  ASSIGN_OR_RETURN(DeviceContext * ctx, lease.Get());
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
  RETURN_IF_ERROR(HostToDevice(ctx, ctx->grad, grad.data, bytes));
  const GradView device_grad{ctx->grad, grad.bf16};
  RETURN_IF_ERROR(rule.UpdateOnDevice(step, device_grad, slice, ctx->stream));
  return Sync(ctx, "the optimizer update on the device");
#else
  (void)rule, (void)step, (void)grad, (void)slice;
  return NoCuda();
#endif
}

}  // namespace zeroshard
