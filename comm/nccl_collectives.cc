#include "comm/nccl_collectives.h"

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

// common/cuda_status.h's codes (out of memory RESOURCE_EXHAUSTED, ...),
// with the call's file:line.
absl::Status CudaError(cudaError_t e, const char* expr, const char* file,
                       int line) {
  return CudaStatus(
      e, absl::StrCat(Basename(file), ":", line, ": ", expr, " failed"));
}

absl::Status NcclError(ncclResult_t r, const char* expr, const char* file,
                       int line) {
  const absl::StatusCode code = r == ncclRemoteError || r == ncclSystemError
                                    ? absl::StatusCode::kUnavailable
                                    : absl::StatusCode::kInternal;
  return absl::Status(
      code, absl::StrCat(Basename(file), ":", line, ": ", expr, " failed: ",
                         ncclGetErrorString(r), " (", ncclGetLastError(nullptr),
                         ")"));
}

#define ZS_CUDA_RETURN_IF_ERROR(expr)                               \
  do {                                                              \
    cudaError_t zs_cuda_e_ = (expr);                                \
    if (zs_cuda_e_ != cudaSuccess) {                                \
      return CudaError(zs_cuda_e_, #expr, __FILE__, __LINE__);      \
    }                                                               \
  } while (0)

// CUDA calls inside a collective: this rank cannot take part, so the group
// breaks (peers would otherwise wait for it until their timeout).
#define ZS_CUDA_FAIL_IF_ERROR(expr)                                      \
  do {                                                                   \
    cudaError_t zs_cuda_e_ = (expr);                                     \
    if (zs_cuda_e_ != cudaSuccess) {                                     \
      return Fail(CudaError(zs_cuda_e_, #expr, __FILE__, __LINE__));     \
    }                                                                    \
  } while (0)

// NCCL calls on the communicator: an error breaks the group.
#define ZS_NCCL_RETURN_IF_ERROR(expr)                                   \
  do {                                                                  \
    ncclResult_t zs_nccl_r_ = (expr);                                   \
    if (zs_nccl_r_ != ncclSuccess && zs_nccl_r_ != ncclInProgress) {    \
      return Fail(NcclError(zs_nccl_r_, #expr, __FILE__, __LINE__));    \
    }                                                                   \
  } while (0)

ncclDataType_t NcclType(ReduceType type) {
  switch (type) {
    case ReduceType::kF32:
      return ncclFloat32;
    case ReduceType::kF64:
      return ncclFloat64;
    case ReduceType::kI64:
      return ncclInt64;
    case ReduceType::kU64:
      return ncclUint64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

}  // namespace

absl::StatusOr<int> VisibleCudaDevices() {
  int count = 0;  // Not written on error (no driver / no device).
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL collectives backend needs a CUDA GPU, and none is visible (",
        e == cudaSuccess ? "0 devices" : cudaGetErrorName(e),
        "); use the 'gloo' backend on CPU workers"));
  }
  return count;
}

NcclWorkerGroup::NcclWorkerGroup(int rank, int size,
                                 const GroupOptions& options)
    : rank_(rank),
      size_(size),
      group_(options.group),
      timeout_(options.timeout) {}

NcclWorkerGroup::~NcclWorkerGroup() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // A healthy non-blocking communicator is finalised first (its work
    // flushed, polled within the timeout) so that the destroy cannot block;
    // a broken one, or one whose finalise fails or outlasts the timeout
    // (a peer gone), is aborted.
    bool finalized = false;
    if (broken_.ok()) {
      ncclResult_t r = ncclCommFinalize(comm_);
      const absl::Time deadline = absl::Now() + timeout_;
      while (r == ncclSuccess || r == ncclInProgress) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state == ncclSuccess) {
          finalized = true;
          break;
        }
        if (state != ncclInProgress || absl::Now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (finalized) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (own_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<NcclWorkerGroup>> NcclWorkerGroup::Create(
    int rank, int size, RendezvousStore* store, const GroupOptions& options) {
  RETURN_IF_ERROR(ValidateGroupShape(rank, size));
  if (store == nullptr) {
    return absl::InvalidArgumentError("worker group needs a rendezvous store");
  }
  ASSIGN_OR_RETURN(int devices, VisibleCudaDevices());
  std::unique_ptr<NcclWorkerGroup> group(
      new NcclWorkerGroup(rank, size, options));
  group->device_ = options.cuda_device >= 0 ? options.cuda_device
                                            : rank % devices;
  if (group->device_ >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_device ", group->device_, " but only ", devices,
                     " devices are visible"));
  }
  ZS_CUDA_RETURN_IF_ERROR(cudaSetDevice(group->device_));
  if (options.cuda_stream != nullptr) {
    group->stream_ = static_cast<cudaStream_t>(options.cuda_stream);
  } else {
    ZS_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&group->stream_, cudaStreamNonBlocking));
    group->own_stream_ = true;
  }

  const absl::Time deadline = absl::Now() + options.join_timeout();
  const std::string key = absl::StrCat("zs/comm/", options.group, "/nccl_id");
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError(r, "ncclGetUniqueId", __FILE__, __LINE__);
    RETURN_IF_ERROR(store->Set(
        key, std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    absl::StatusOr<std::string> value =
        store->Get(key, options.join_timeout());
    if (!value.ok()) {
      return absl::Status(
          value.status().code(),
          absl::StrCat("worker group '", options.group, "': rank 0 did not "
                       "publish the NCCL id: ", value.status().message()));
    }
    if (value->size() != sizeof(id)) {
      return absl::DataLossError(absl::StrCat(
          "worker group '", options.group, "': NCCL id of ", value->size(),
          " bytes, expected ", sizeof(id)));
    }
    std::memcpy(&id, value->data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r =
      ncclCommInitRankConfig(&group->comm_, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    group->comm_ = nullptr;
    return NcclError(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  }
  RETURN_IF_ERROR(group->AwaitComm(deadline, "connect"));
  ZS_LOG(INFO) << "connected worker group '" << options.group << "' (rank "
               << rank << " of " << size << ") over nccl on device "
               << group->device_;
  return group;
}

absl::Status NcclWorkerGroup::Fail(absl::Status status) {
  if (broken_.ok()) broken_ = status;
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return status;
}

absl::Status NcclWorkerGroup::CheckUsable(const char* op) const {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, " on broken worker group '", group_, "': ", broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status NcclWorkerGroup::AwaitComm(absl::Time deadline, const char* op) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) {
      return Fail(NcclError(r, "ncclCommGetAsyncError", __FILE__, __LINE__));
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return Fail(NcclError(state, op, __FILE__, __LINE__));
    }
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          op, " in worker group '", group_, "' (rank ", rank_, " of ", size_,
          "): a peer did not arrive within ", absl::FormatDuration(timeout_))));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

absl::Status NcclWorkerGroup::AwaitStream(absl::Time deadline,
                                          const char* op) {
  RETURN_IF_ERROR(AwaitComm(deadline, op));
  while (true) {
    cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return Fail(CudaError(e, "cudaStreamQuery", __FILE__, __LINE__));
    }
    // "Not ready" is recorded as the thread's last error; left there, a
    // kernel launch checked on this thread would report it.
    (void)cudaGetLastError();
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(NcclError(state, op, __FILE__, __LINE__));
    }
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          op, " in worker group '", group_, "' (rank ", rank_, " of ", size_,
          "): not complete within ", absl::FormatDuration(timeout_),
          " (a peer is missing or stuck)")));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

absl::Status NcclWorkerGroup::EnsureScratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return absl::OkStatus();
  if (scratch_ != nullptr) {
    ZS_CUDA_FAIL_IF_ERROR(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
  }
  ZS_CUDA_FAIL_IF_ERROR(cudaMalloc(&scratch_, bytes));
  scratch_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status NcclWorkerGroup::AllGather(absl::Span<const uint8_t> local,
                                        absl::Span<uint8_t> out) {
  RETURN_IF_ERROR(CheckUsable("all-gather"));
  RETURN_IF_ERROR(ValidateAllGather(size_, local.size(), out.size()));
  if (local.empty()) return absl::OkStatus();
  ZS_CUDA_FAIL_IF_ERROR(cudaSetDevice(device_));
  // In place when local is exactly this rank's slot of out (NCCL allows it).
  ZS_NCCL_RETURN_IF_ERROR(ncclAllGather(local.data(), out.data(), local.size(),
                                        ncclUint8, comm_, stream_));
  return AwaitComm(absl::Now() + timeout_, "all-gather");
}

absl::Status NcclWorkerGroup::AllGatherInPlace(absl::Span<uint8_t> out) {
  if (out.size() % size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather: output of ", out.size(), " bytes does not split into ",
        size_, " equal parts"));
  }
  const size_t part = out.size() / size_;
  return AllGather(absl::MakeConstSpan(out.data() + rank_ * part, part), out);
}

absl::Status NcclWorkerGroup::ReduceScatter(absl::Span<const float> in,
                                            absl::Span<float> out,
                                            float scale) {
  RETURN_IF_ERROR(CheckUsable("reduce-scatter"));
  RETURN_IF_ERROR(ValidateReduceScatter(size_, in.size(), out.size(), scale));
  if (out.empty()) return absl::OkStatus();
  ZS_CUDA_FAIL_IF_ERROR(cudaSetDevice(device_));
  ncclRedOp_t op = ncclSum;
  const bool scaled = scale != 1.0f;
  if (scaled) {
    // Each rank's input is multiplied by `scale` before the sum.
    ZS_NCCL_RETURN_IF_ERROR(ncclRedOpCreatePreMulSum(
        &op, &scale, ncclFloat32, ncclScalarHostImmediate, comm_));
  }
  ncclResult_t r = ncclReduceScatter(in.data(), out.data(), out.size(),
                                     ncclFloat32, op, comm_, stream_);
  ZS_NCCL_RETURN_IF_ERROR(r);
  RETURN_IF_ERROR(AwaitComm(absl::Now() + timeout_, "reduce-scatter"));
  // A non-blocking communicator takes no call until the previous one is
  // complete: the op goes once the reduce-scatter is enqueued.
  if (scaled) ZS_NCCL_RETURN_IF_ERROR(ncclRedOpDestroy(op, comm_));
  return absl::OkStatus();
}

absl::Status NcclWorkerGroup::AllReduceHost(ReduceType type, void* values,
                                            size_t count, ReduceOp op) {
  RETURN_IF_ERROR(CheckUsable("all-reduce"));
  const size_t bytes = count * ReduceTypeBytes(type);
  if (bytes > (size_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce is for small vectors: ", bytes, " bytes > 16 MiB"));
  }
  if (count == 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout_;
  ZS_CUDA_FAIL_IF_ERROR(cudaSetDevice(device_));
  // Copies to and from pageable host memory wait for the stream without a
  // deadline: the stream is made idle, within the deadline, before each.
  RETURN_IF_ERROR(AwaitStream(deadline, "all-reduce"));
  RETURN_IF_ERROR(EnsureScratch(bytes));
  ZS_CUDA_FAIL_IF_ERROR(cudaMemcpyAsync(scratch_, values, bytes,
                                          cudaMemcpyHostToDevice, stream_));
  ZS_NCCL_RETURN_IF_ERROR(ncclAllReduce(scratch_, scratch_, count,
                                        NcclType(type), NcclOp(op), comm_,
                                        stream_));
  RETURN_IF_ERROR(AwaitStream(deadline, "all-reduce"));
  ZS_CUDA_FAIL_IF_ERROR(cudaMemcpyAsync(values, scratch_, bytes,
                                          cudaMemcpyDeviceToHost, stream_));
  return AwaitStream(deadline, "all-reduce");
}

absl::Status NcclWorkerGroup::Broadcast(std::string* bytes, int root) {
  RETURN_IF_ERROR(CheckUsable("broadcast"));
  if (bytes == nullptr) {
    return absl::InvalidArgumentError("broadcast: null string");
  }
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast: root ", root, " out of range for group size ", size_));
  }
  const absl::Time deadline = absl::Now() + timeout_;
  ZS_CUDA_FAIL_IF_ERROR(cudaSetDevice(device_));
  uint64_t length = rank_ == root ? bytes->size() : 0;
  // As in AllReduceHost: the stream idle before each pageable copy.
  RETURN_IF_ERROR(AwaitStream(deadline, "broadcast"));
  RETURN_IF_ERROR(EnsureScratch(sizeof(length)));
  ZS_CUDA_FAIL_IF_ERROR(cudaMemcpyAsync(scratch_, &length, sizeof(length),
                                          cudaMemcpyHostToDevice, stream_));
  ZS_NCCL_RETURN_IF_ERROR(ncclBroadcast(scratch_, scratch_, 1, ncclUint64,
                                        root, comm_, stream_));
  RETURN_IF_ERROR(AwaitStream(deadline, "broadcast"));
  ZS_CUDA_FAIL_IF_ERROR(cudaMemcpyAsync(&length, scratch_, sizeof(length),
                                          cudaMemcpyDeviceToHost, stream_));
  RETURN_IF_ERROR(AwaitStream(deadline, "broadcast"));
  if (length > kMaxBroadcastBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast: rank ", root, "'s payload is over 64 MiB"));
  }
  if (length == 0) {
    bytes->clear();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(EnsureScratch(length));
  if (rank_ == root) {
    ZS_CUDA_FAIL_IF_ERROR(cudaMemcpyAsync(scratch_, bytes->data(), length,
                                            cudaMemcpyHostToDevice, stream_));
  }
  ZS_NCCL_RETURN_IF_ERROR(ncclBroadcast(scratch_, scratch_, length, ncclUint8,
                                        root, comm_, stream_));
  RETURN_IF_ERROR(AwaitStream(deadline, "broadcast"));
  bytes->resize(length);
  ZS_CUDA_FAIL_IF_ERROR(cudaMemcpyAsync(bytes->data(), scratch_, length,
                                          cudaMemcpyDeviceToHost, stream_));
  return AwaitStream(deadline, "broadcast");
}

absl::Status NcclWorkerGroup::Barrier() {
  float one = 1.0f;
  return AllReduce(absl::MakeSpan(&one, 1), ReduceOp::kSum);
}

absl::Status NcclWorkerGroup::Synchronize() {
  RETURN_IF_ERROR(CheckUsable("synchronize"));
  ZS_CUDA_FAIL_IF_ERROR(cudaSetDevice(device_));
  return AwaitStream(absl::Now() + timeout_, "synchronize");
}

}  // namespace zeroshard
