// NCCL for the step engine as it is today: a WorkerGroup over HOST buffers
// (the Gloo contract) that stages them through the device and runs the
// collectives on an NcclWorkerGroup (nccl_collectives.h: ncclUniqueId
// through the rendezvous store, a non-blocking communicator polled against
// the group's timeout and aborted on expiry or error, never a hang).
//
// Each all-gather / reduce-scatter copies its input to a device buffer of
// the group's, enqueues the collective, waits for it with the group's
// bounded Synchronize (so a stuck peer ends in DEADLINE_EXCEEDED and an
// aborted communicator, not in a blocking copy), and copies the result
// back. On a multi-GPU machine NCCL's NVLink/PCIe paths replace Gloo's TCP
// at the price of the two copies; the engine that keeps units on the device
// and overlaps them with compute is not built yet (docs/DESIGN.md, "The GPU
// path"). Built only with CUDA and NCCL.
//
//   ASSIGN_OR_RETURN(auto group, CreateWorkerGroup("nccl-host", r, n, &kv, o));
#ifndef ZEROSHARD_WORKER_COMM_NCCL_HOST_GROUP_H_
#define ZEROSHARD_WORKER_COMM_NCCL_HOST_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/collectives.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<WorkerGroup>> CreateHostStagedNcclGroup(
    int rank, int size, RendezvousStore* store, const GroupOptions& options);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMM_NCCL_HOST_GROUP_H_
