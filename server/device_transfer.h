// The data movement of --placement=device: the shard's master, m, v and BF16
// mirror live in GPU memory, and everything that reads or writes them from
// the host (fills, gathers, SetWeights, restores, snapshots, norms, updates)
// goes through these calls. docs/DESIGN.md, "State placement".
//
// One device per server process (--cuda_device, default 0). Each call
// borrows a context — a non-blocking CUDA stream, a pinned staging buffer
// and a grow-only device gradient buffer — from a pool of at most one per
// core (at least 4; a caller waits for a free one), so the gRPC and
// optimizer-pool threads copy and update different chunks at once while
// pinned and device memory stay bounded however many threads run. Every
// call waits for its own stream before returning, so the caller's host
// memory is free to reuse when it returns.
//
//   RETURN_IF_ERROR(SelectStateDevice(0));
//   RETURN_IF_ERROR(CopyHostToDevice(d_master + i, host, n * 4));
//   RETURN_IF_ERROR(UpdateFromHost(rule, step, GradView::Fp32(g),
//                                  {d_master, {d_m, d_v}, d_mirror, n}));
//
// Without CUDA in the build every call is FAILED_PRECONDITION (the device
// placement is refused before any state exists: placement.h).
#ifndef ZEROSHARD_SERVER_DEVICE_TRANSFER_H_
#define ZEROSHARD_SERVER_DEVICE_TRANSFER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "optim/update_rule.h"

namespace zeroshard {

// Chooses the device for state placed on the device: INVALID_ARGUMENT for a
// negative ordinal, FAILED_PRECONDITION when there is no such device. Call
// before any device StateBuffer is allocated.
absl::Status SelectStateDevice(int ordinal);
// The selected device (0 unless SelectStateDevice chose another).
int StateDevice();

// Device <-> host copies of `bytes`, through the thread's pinned staging
// buffer (so that `host` may be ordinary pageable memory).
absl::Status CopyHostToDevice(void* device_dst, const void* host_src,
                              size_t bytes);
absl::Status CopyDeviceToHost(void* host_dst, const void* device_src,
                              size_t bytes);
absl::Status ZeroDevice(void* device_dst, size_t bytes);

// One update of `slice` (device arrays; mirror may be null) by `rule` from
// a gradient in host memory (`grad`, slice.n elements of FP32 or BF16, any
// alignment): the gradient is copied to the device and the rule's device
// kernel applied (AdamW: optim/adam_device.h, the reference's own element
// function).
absl::Status UpdateFromHost(const UpdateRule& rule, const AdamStep& step,
                            GradView grad, const StateSlice& slice);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_DEVICE_TRANSFER_H_
