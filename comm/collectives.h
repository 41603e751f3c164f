// Collectives among the workers of one training run: WorkerGroup.
//
// A WorkerGroup is the set of N worker processes (ranks 0..N-1) that split
// every unit of the flat parameter space into N equal, contiguous partitions
// (docs/DESIGN.md, "One training step"). It offers what the step needs:
// all-gather of a unit's partitions, reduce-scatter of a unit's FP32
// gradient, small all-reduces (global grad norm, overflow flag, config
// agreement), broadcast of a small byte string, and a barrier.
//
// Backends: "gloo" (CPU, TCP; gloo_collectives.h) and "nccl" (GPU;
// nccl_collectives.h, built only with CUDA). Both rendezvous through a
// RendezvousStore (common/rendezvous.h): the shard server's key-value RPC in
// production, InMemoryRendezvousStore in single-process tests.
//
//   GroupOptions options;
//   options.group = absl::StrCat("run-", run_id, "/workers");
//   options.timeout = absl::Seconds(60);
//   ASSIGN_OR_RETURN(std::unique_ptr<WorkerGroup> group,
//                    CreateWorkerGroup("gloo", rank, world, &kv, options));
//   RETURN_IF_ERROR(group->AgreeOn("config", config_fingerprint));
//   RETURN_IF_ERROR(group->AllGatherInPlace(unit_bytes));         // forward
//   RETURN_IF_ERROR(group->ReduceScatter(unit_grad, my_grad_part, 1.0f));
//   double norm_and_flag[2] = {sum_sq, overflow ? 1.0 : 0.0};
//   RETURN_IF_ERROR(group->AllReduce(absl::MakeSpan(norm_and_flag), ReduceOp::kSum));
//
// Contracts (every backend):
// - Collective calls are made by every rank, in the same order, with the same
//   sizes (a size mismatch is a caller bug; it is detected where possible
//   and otherwise fails with the timeout). One thread at a time per group.
// - Buffers are host memory for "gloo" and device memory (on the group's CUDA
//   stream) for "nccl", except AllReduce / Broadcast / AgreeOn, whose
//   arguments are always host memory.
// - Every call is bounded by GroupOptions::timeout. A peer that never arrives
//   gives DEADLINE_EXCEEDED naming the peer rank where the backend can tell;
//   a peer whose connection breaks (its process died) gives UNAVAILABLE naming
//   the peer rank. After any failed call the group is broken: every later
//   call returns FAILED_PRECONDITION carrying the first error. Build a new
//   group (with a new GroupOptions::group name) to continue.
// - Bad arguments (sizes that do not split over size(), a bad root) give
//   INVALID_ARGUMENT before any communication and do not break the group.
#ifndef ZEROSHARD_WORKER_COMM_COLLECTIVES_H_
#define ZEROSHARD_WORKER_COMM_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/rendezvous.h"

namespace zeroshard {

enum class ReduceOp { kSum, kMax, kMin };

// Element types of the small all-reduce.
enum class ReduceType { kF32, kF64, kI64, kU64 };

struct GroupOptions {
  // Names this group in the rendezvous store: keys live under
  // "zs/comm/<group>/". Every rank of one group uses the same name; a new
  // group over the same store (a restart, a resize) needs a new name, e.g.
  // "<run id>/workers/<attempt>".
  std::string group = "workers";
  // Bound on every call, including creation (rendezvous + connect) unless
  // rendezvous_timeout says otherwise.
  absl::Duration timeout = absl::Seconds(60);
  // Bound on creation's rendezvous and connect alone; zero: `timeout`.
  // Joining waits for peers that may still be starting, or being restarted
  // after a peer died (zeroshard-worker passes its start-up timeout), which
  // takes longer than a collective may.
  absl::Duration rendezvous_timeout = absl::ZeroDuration();
  absl::Duration join_timeout() const {
    return rendezvous_timeout > absl::ZeroDuration() ? rendezvous_timeout
                                                     : timeout;
  }
  // Gloo TCP: the address this rank listens on and advertises. Loopback by
  // default; a host name or IP of this machine for multi-host groups
  // (zeroshard-worker passes the address it reaches server 0 from:
  // advertised_address.h). Creation fails at once with FAILED_PRECONDITION
  // when this rank's address is loopback and a peer's is not.
  // `interface` (e.g. "eth0"), when set, takes precedence over `hostname`
  // (and the check is skipped).
  std::string hostname = "127.0.0.1";
  std::string interface;
  // NCCL: the CUDA device (-1: rank % device count) and the cudaStream_t on
  // which device-buffer collectives are enqueued (nullptr: a stream of the
  // group's own).
  int cuda_device = -1;
  void* cuda_stream = nullptr;
};

class WorkerGroup {
 public:
  virtual ~WorkerGroup() = default;
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl" or "nccl-host".
  virtual absl::string_view backend() const = 0;
  // Whether AllGather / AllGatherInPlace / ReduceScatter take device
  // memory (NCCL: enqueued on the group's stream, complete after
  // Synchronize()); false: host memory, complete on return.
  virtual bool device_buffers() const { return false; }

  // out = concatenation of every rank's `local`, in rank order.
  // Requires out.size() == size() * local.size(); `local` must not overlap
  // `out` except as exactly out[rank*local.size(), ...) (then it is in place).
  virtual absl::Status AllGather(absl::Span<const uint8_t> local,
                                 absl::Span<uint8_t> out) = 0;

  // In-place all-gather: this rank's part already sits at
  // out[rank*part, (rank+1)*part) with part = out.size() / size(); on return
  // every part is filled. Requires out.size() % size() == 0.
  virtual absl::Status AllGatherInPlace(absl::Span<uint8_t> out) = 0;

  // Reduce-scatter of FP32 with sum: `in` is this rank's full unit buffer of
  // size() * out.size() elements; on return
  //   out[i] = scale * sum over ranks q of in_q[rank*part + i].
  // scale = 1 gives the sum, 1/size() the average. `in` is not modified and
  // must not overlap `out`. Summation order is fixed by the backend (equal
  // on every run), not the serial order.
  virtual absl::Status ReduceScatter(absl::Span<const float> in,
                                     absl::Span<float> out, float scale) = 0;

  // Element-wise all-reduce of a small host vector (a few KiB), in place;
  // every rank gets the same bits. Each rank passes the same length.
  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) {
    return AllReduceHost(ReduceType::kF32, values.data(), values.size(), op);
  }
  absl::Status AllReduce(absl::Span<double> values, ReduceOp op) {
    return AllReduceHost(ReduceType::kF64, values.data(), values.size(), op);
  }
  absl::Status AllReduce(absl::Span<int64_t> values, ReduceOp op) {
    return AllReduceHost(ReduceType::kI64, values.data(), values.size(), op);
  }
  absl::Status AllReduce(absl::Span<uint64_t> values, ReduceOp op) {
    return AllReduceHost(ReduceType::kU64, values.data(), values.size(), op);
  }

  // Root's `*bytes` (host, any length up to kMaxBroadcastBytes = 64 MiB)
  // replaces every other rank's `*bytes`. Requires 0 <= root < size().
  static constexpr uint64_t kMaxBroadcastBytes = uint64_t{64} << 20;
  virtual absl::Status Broadcast(std::string* bytes, int root) = 0;

  // Returns when every rank has entered the barrier.
  virtual absl::Status Barrier() = 0;

  // Waits for collectives enqueued on a device stream (NCCL); no-op for
  // backends whose calls complete before returning (Gloo).
  virtual absl::Status Synchronize() { return absl::OkStatus(); }

  // Checks that every rank holds the same `fingerprint` of `what` (e.g. a
  // hash of the resolved config). OK when all agree; FAILED_PRECONDITION
  // naming the ranks whose fingerprint differs from rank 0's otherwise (the
  // group stays usable). Every rank gets the same verdict.
  absl::Status AgreeOn(absl::string_view what, uint64_t fingerprint);

 protected:
  WorkerGroup() = default;
  // `values` holds `count` elements of `type`, in host memory.
  virtual absl::Status AllReduceHost(ReduceType type, void* values,
                                     size_t count, ReduceOp op) = 0;
};

// Creates and connects a group: blocks until all `size` ranks have joined
// through `store` or GroupOptions::timeout passes (DEADLINE_EXCEEDED naming
// the ranks that did not join). `backend` is "gloo", "nccl" (device buffers)
// or "nccl-host" (host buffers staged through the device:
// nccl_host_group.h); the NCCL ones give FAILED_PRECONDITION when no GPU is
// visible and UNIMPLEMENTED in a build without CUDA/NCCL. `store` must
// outlive the call only.
absl::StatusOr<std::unique_ptr<WorkerGroup>> CreateWorkerGroup(
    absl::string_view backend, int rank, int size, RendezvousStore* store,
    const GroupOptions& options);

// Whether `backend` can be created on this machine and build, without
// joining anything (the checks CreateWorkerGroup would fail on first).
absl::Status CheckBackendUsable(absl::string_view backend);

// Validation shared by the backends (INVALID_ARGUMENT with what was wrong).
absl::Status ValidateGroupShape(int rank, int size);
absl::Status ValidateAllGather(int size, size_t local_bytes, size_t out_bytes);
absl::Status ValidateReduceScatter(int size, size_t in_elems, size_t out_elems,
                                   float scale);
size_t ReduceTypeBytes(ReduceType type);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMM_COLLECTIVES_H_
