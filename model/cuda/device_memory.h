// DeviceMemory: a CUDA device's memory as the step engine's ModelMemory
// (model/model_memory.h), ordered with one compute stream (the
// DeviceGptModel's).
//
// Host buffers the engine copies to and from (the partition, the gradient
// shard) are page-locked in place with cudaHostRegister.
// Fence waits and copies poll the device, bounded by timeout() (the
// engine's step timeout): a stuck kernel is DEADLINE_EXCEEDED, not a hang.
// Allocations are pooled by size: the engine frees and allocates the same
// few unit sizes every step, and cudaMalloc / cudaFree synchronise the
// device. Copies run on the calling thread's per-thread stream and wait;
// Zero is enqueued on the compute stream; a fence is an event recorded on
// it. Out of memory is RESOURCE_EXHAUSTED (after the free pool was
// returned to the device and the allocation retried once).
//
//   DeviceMemory mem(/*device=*/0, stream);
//   ASSIGN_OR_RETURN(void* p, mem.Allocate(bytes));
#ifndef ZEROSHARD_MODEL_CUDA_DEVICE_MEMORY_H_
#define ZEROSHARD_MODEL_CUDA_DEVICE_MEMORY_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "model/model_memory.h"

namespace zeroshard::model {

class DeviceMemory final : public ModelMemory {
 public:
  DeviceMemory(int device, cudaStream_t stream);
  // Waits for the device, then frees every allocation (the engine returned
  // its buffers first).
  ~DeviceMemory() override;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  const char* name() const override { return name_.c_str(); }
  bool host_addressable() const override { return false; }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  absl::Status CopyToModel(void* dst, const void* host, size_t bytes) override;
  absl::Status CopyFromModel(void* host, const void* src,
                             size_t bytes) override;
  absl::Status PinHost(void* host, size_t bytes) override;
  void UnpinHost(void* host) override;
  absl::Status Zero(void* p, size_t bytes) override;
  absl::StatusOr<std::shared_ptr<ModelFence>> Fence() override;

  // Bytes allocated from the device (in use and pooled).
  uint64_t reserved_bytes() const;

 private:
  absl::Status Select() const;
  // A copy on the calling thread's per-thread stream, waited for (bounded
  // by timeout()).
  absl::Status Copy(void* dst, const void* src, size_t bytes,
                    cudaMemcpyKind kind, const char* what);

  const int device_;
  const cudaStream_t stream_;
  const std::string name_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> size_of_;  // every allocation
  std::multimap<size_t, void*> free_;          // pooled, by size
  uint64_t reserved_ = 0;
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_CUDA_DEVICE_MEMORY_H_
