// ModelMemory: the memory a UnitModel computes in when that is not the
// host's (the CUDA model's device), as the step engine sees it: it keeps
// the gathered units, the partition and the full-unit gradients there, so
// that nothing crosses the bus per call (docs/DESIGN.md, "The GPU path").
// The engine does not depend on CUDA; it only holds this interface.
//
// The model's work is asynchronous: a call may return while its kernels
// still read the unit and write the gradient. A Fence marks the model's
// work enqueued so far; the engine takes one before it hands a buffer the
// model used to another thread (a reduce-scatter of the gradient, the next
// gather into a released unit buffer) and that thread waits on it.
//
//   ModelMemory* mem = model->memory_space();         // null: host memory
//   ASSIGN_OR_RETURN(void* grad, mem->Allocate(bytes));
//   RETURN_IF_ERROR(mem->Zero(grad, bytes));          // ordered before the model
//   RETURN_IF_ERROR(model->BlockBackward(l, p, {static_cast<float*>(grad), n}));
//   ASSIGN_OR_RETURN(auto fence, mem->Fence());
//   // comm thread:
//   RETURN_IF_ERROR(fence->Wait());
//   RETURN_IF_ERROR(group->ReduceScatter(...));       // a group of device buffers
//   RETURN_IF_ERROR(mem->CopyFromModel(host, out, part_bytes));
//   mem->Free(grad);
//
// Thread-safety: every method may be called from any thread.
#ifndef ZEROSHARD_MODEL_MODEL_MEMORY_H_
#define ZEROSHARD_MODEL_MODEL_MEMORY_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zeroshard::model {

// A point in the model's work; Wait() blocks until everything enqueued
// before it has finished (or returns the error that stopped it).
class ModelFence {
 public:
  virtual ~ModelFence() = default;
  virtual absl::Status Wait() = 0;
};

class ModelMemory {
 public:
  virtual ~ModelMemory() = default;

  // "cuda:K", or a test's name.
  virtual const char* name() const = 0;
  // Whether the host can read and write this memory directly (only a test's
  // stand-in; a device's memory is not). A host-memory collectives group
  // (Gloo) can then work on it; otherwise the group must take device
  // buffers (WorkerGroup::device_buffers()).
  virtual bool host_addressable() const = 0;

  // `bytes` (> 0) of model memory, uninitialised; RESOURCE_EXHAUSTED when
  // the device is full. Free takes what Allocate returned, once no work
  // uses it any more (after a Fence's Wait, or a synchronous copy).
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // Synchronous copies between host memory and model memory.
  virtual absl::Status CopyToModel(void* dst, const void* host,
                                   size_t bytes) = 0;
  virtual absl::Status CopyFromModel(void* host, const void* src,
                                     size_t bytes) = 0;
  // Registers host memory for fast copies (CUDA: page-locked, so copies
  // run at the bus's speed without a bounce buffer); Unpin before it is
  // freed. A failure leaves the memory usable, only slower to copy.
  virtual absl::Status PinHost(void* host, size_t bytes) = 0;
  virtual void UnpinHost(void* host) = 0;
  // Zeroes model memory in the model's order: before the model's work
  // enqueued after it.
  virtual absl::Status Zero(void* p, size_t bytes) = 0;
  // A fence after the model's work enqueued so far.
  virtual absl::StatusOr<std::shared_ptr<ModelFence>> Fence() = 0;

  // How long a fence's Wait or a copy may take before it gives
  // DEADLINE_EXCEEDED instead of waiting on (a stuck kernel): the engine
  // sets its step timeout. A copy that timed out may still land, so the
  // step that saw the error must not reuse its buffers (the worker exits).
  void set_timeout(absl::Duration timeout) { timeout_ = timeout; }
  absl::Duration timeout() const { return timeout_; }

 private:
  absl::Duration timeout_ = absl::Minutes(10);
};

}  // namespace zeroshard::model

#endif  // ZEROSHARD_MODEL_MODEL_MEMORY_H_
