// NcclWorkerGroup: the GPU WorkerGroup, on NCCL (built only with CUDA).
//
// Rank 0 creates the ncclUniqueId and publishes it in the RendezvousStore
// under "zs/comm/<group>/nccl_id"; the others wait for it (bounded by
// GroupOptions::timeout). The communicator is created non-blocking and
// polled, so a rank that never joins gives DEADLINE_EXCEEDED (NCCL cannot
// say which rank) and the communicator is aborted, never a hang.
//
// Buffers of AllGather / AllGatherInPlace / ReduceScatter are DEVICE memory;
// the calls are enqueued on the group's stream (GroupOptions::cuda_stream,
// or one of its own) and return once enqueued: the results are
// stream-ordered, and Synchronize() waits for them (bounded; a stuck or
// failed collective aborts the communicator and breaks the group).
// AllReduce / Broadcast / Barrier / AgreeOn take host memory, copy through a
// device scratch buffer and wait before returning.
// Errors are absl::Status with the file:line of the failing CUDA/NCCL call.
//
//   GroupOptions opts;  opts.cuda_stream = stream;
//   ASSIGN_OR_RETURN(auto group, NcclWorkerGroup::Create(rank, n, &kv, opts));
//   RETURN_IF_ERROR(group->AllGatherInPlace({d_unit, unit_bytes}));
//   RETURN_IF_ERROR(group->Synchronize());
#ifndef ZEROSHARD_WORKER_COMM_NCCL_COLLECTIVES_H_
#define ZEROSHARD_WORKER_COMM_NCCL_COLLECTIVES_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/collectives.h"

namespace zeroshard {

// OK with the number of visible CUDA devices, FAILED_PRECONDITION when there
// is none (or the driver reports an error, as on a machine without a GPU).
absl::StatusOr<int> VisibleCudaDevices();

class NcclWorkerGroup : public WorkerGroup {
 public:
  static absl::StatusOr<std::unique_ptr<NcclWorkerGroup>> Create(
      int rank, int size, RendezvousStore* store, const GroupOptions& options);
  ~NcclWorkerGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::string_view backend() const override { return "nccl"; }
  bool device_buffers() const override { return true; }

  absl::Status AllGather(absl::Span<const uint8_t> local,
                         absl::Span<uint8_t> out) override;
  absl::Status AllGatherInPlace(absl::Span<uint8_t> out) override;
  absl::Status ReduceScatter(absl::Span<const float> in, absl::Span<float> out,
                             float scale) override;
  absl::Status Broadcast(std::string* bytes, int root) override;
  absl::Status Barrier() override;
  absl::Status Synchronize() override;

  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 protected:
  absl::Status AllReduceHost(ReduceType type, void* values, size_t count,
                             ReduceOp op) override;

 private:
  NcclWorkerGroup(int rank, int size, const GroupOptions& options);

  absl::Status CheckUsable(const char* op) const;
  // Waits until the communicator is no longer ncclInProgress (non-blocking
  // mode) or the deadline passes.
  absl::Status AwaitComm(absl::Time deadline, const char* op);
  // Waits for the stream, polling NCCL's async error, up to the deadline.
  absl::Status AwaitStream(absl::Time deadline, const char* op);
  // Records the first error, aborts the communicator, returns `status`.
  absl::Status Fail(absl::Status status);
  absl::Status EnsureScratch(size_t bytes);

  const int rank_;
  const int size_;
  const std::string group_;
  const absl::Duration timeout_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  ncclComm_t comm_ = nullptr;
  void* scratch_ = nullptr;  // device memory for host-argument collectives
  size_t scratch_bytes_ = 0;
  absl::Status broken_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMM_NCCL_COLLECTIVES_H_
