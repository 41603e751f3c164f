#include "model/cuda/device_memory.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/device_scratch.h"
#include "common/status_macros.h"

namespace zeroshard::model {
namespace {

// Waits until `event` completed, polling, at most `timeout`: a stuck kernel
// becomes DEADLINE_EXCEEDED instead of a hang.
absl::Status AwaitEvent(cudaEvent_t event, absl::Duration timeout,
                        const char* what) {
  const absl::Time deadline = absl::Now() + timeout;
  auto pause = std::chrono::microseconds(20);
  while (true) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaStatus(e, what);
    // "Not ready" is recorded as the thread's last error; left there, the
    // next kernel launch's check would report it.
    (void)cudaGetLastError();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": the device did not finish within ",
                       absl::FormatDuration(timeout), " (a stuck kernel?)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

class EventFence final : public ModelFence {
 public:
  EventFence(int device, cudaEvent_t event, absl::Duration timeout)
      : device_(device), event_(event), timeout_(timeout) {}
  ~EventFence() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }
  absl::Status Wait() override {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "selecting the device"));
    return AwaitEvent(event_, timeout_, "waiting for the model's work");
  }

 private:
  const int device_;
  const cudaEvent_t event_;
  const absl::Duration timeout_;
};

// Waits for the calling thread's per-thread stream, bounded by `timeout`.
absl::Status AwaitPerThreadStream(absl::Duration timeout, const char* what) {
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(CudaStatus(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what));
  absl::Status s =
      CudaStatus(cudaEventRecord(event, cudaStreamPerThread), what);
  if (s.ok()) s = AwaitEvent(event, timeout, what);
  cudaEventDestroy(event);
  return s;
}

}  // namespace

DeviceMemory::DeviceMemory(int device, cudaStream_t stream)
    : device_(device), stream_(stream), name_(absl::StrCat("cuda:", device)) {}

DeviceMemory::~DeviceMemory() {
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (const auto& [p, bytes] : size_of_) cudaFree(p);
}

absl::Status DeviceMemory::Select() const {
  return CudaStatus(cudaSetDevice(device_), "selecting the model's device");
}

uint64_t DeviceMemory::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

absl::StatusOr<void*> DeviceMemory::Allocate(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("device memory: allocation of 0 bytes");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      return p;
    }
  }
  RETURN_IF_ERROR(Select());
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the error the runtime keeps for it
    // Pooled buffers of other sizes go back to the device, then one retry.
    std::vector<void*> pooled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [size, q] : free_) {
        pooled.push_back(q);
        size_of_.erase(q);
        reserved_ -= size;
      }
      free_.clear();
    }
    for (void* q : pooled) cudaFree(q);
    // So does what the stream-ordered pool keeps (the model's activations
    // are freed into it on the compute stream and kept:
    // DeviceGptModel::Create), once the compute stream has run those frees:
    // a bounded wait, never the whole device (a collective stuck on a
    // missing peer would hold a device-wide one forever).
    cudaEvent_t freed = nullptr;
    if (cudaEventCreateWithFlags(&freed, cudaEventDisableTiming) ==
            cudaSuccess &&
        cudaEventRecord(freed, stream_) == cudaSuccess &&
        AwaitEvent(freed, timeout(), "waiting for the model's frees").ok()) {
      TrimStreamOrderedPool();
    }
    if (freed != nullptr) cudaEventDestroy(freed);
    (void)cudaGetLastError();
    e = cudaMalloc(&p, bytes);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(e, absl::StrCat("allocating ", bytes, " bytes on ",
                                      name_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_of_[p] = bytes;
  reserved_ += bytes;
  return p;
}

void DeviceMemory::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = size_of_.find(p);
  if (it == size_of_.end()) return;  // not ours: ignored, never freed twice
  free_.emplace(it->second, p);
}

absl::Status DeviceMemory::Copy(void* dst, const void* src, size_t bytes,
                                cudaMemcpyKind kind, const char* what) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Select());
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(dst, src, bytes, kind, cudaStreamPerThread), what));
  return AwaitPerThreadStream(timeout(), what);
}

absl::Status DeviceMemory::CopyToModel(void* dst, const void* host,
                                       size_t bytes) {
  return Copy(dst, host, bytes, cudaMemcpyHostToDevice,
              "copying to the device");
}

absl::Status DeviceMemory::CopyFromModel(void* host, const void* src,
                                         size_t bytes) {
  return Copy(host, src, bytes, cudaMemcpyDeviceToHost,
              "copying from the device");
}

absl::Status DeviceMemory::PinHost(void* host, size_t bytes) {
  if (host == nullptr || bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Select());
  cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(e, absl::StrCat("page-locking ", bytes, " host bytes"));
  }
  return absl::OkStatus();
}

void DeviceMemory::UnpinHost(void* host) {
  if (host == nullptr) return;
  cudaSetDevice(device_);
  if (cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

absl::Status DeviceMemory::Zero(void* p, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Select());
  return CudaStatus(cudaMemsetAsync(p, 0, bytes, stream_), "zeroing");
}

absl::StatusOr<std::shared_ptr<ModelFence>> DeviceMemory::Fence() {
  RETURN_IF_ERROR(Select());
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(CudaStatus(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
      "creating a fence"));
  if (absl::Status s = CudaStatus(cudaEventRecord(event, stream_),
                                  "recording a fence");
      !s.ok()) {
    cudaEventDestroy(event);
    return s;
  }
  return std::shared_ptr<ModelFence>(
      std::make_shared<EventFence>(device_, event, timeout()));
}

}  // namespace zeroshard::model
