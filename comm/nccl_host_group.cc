#include "comm/nccl_host_group.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/device_scratch.h"
#include "common/status_macros.h"
#include "comm/nccl_collectives.h"

namespace zeroshard {
namespace {

// The shared CUDA-error conversion (common/cuda_status.h), named for this
// group.
absl::Status Cuda(cudaError_t e, const char* what) {
  return CudaStatus(e, absl::StrCat("nccl-host: ", what));
}

class HostStagedNcclGroup final : public WorkerGroup {
 public:
  explicit HostStagedNcclGroup(std::unique_ptr<NcclWorkerGroup> inner)
      : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::string_view backend() const override { return "nccl"; }

  absl::Status AllGather(absl::Span<const uint8_t> local,
                         absl::Span<uint8_t> out) override {
    RETURN_IF_ERROR(ValidateAllGather(size(), local.size(), out.size()));
    RETURN_IF_ERROR(Select());
    ASSIGN_OR_RETURN(uint8_t * d, Staging(a_, out.size()));
    const size_t part = local.size();
    RETURN_IF_ERROR(Up(d + rank() * part, local.data(), part));
    RETURN_IF_ERROR(inner_->AllGatherInPlace({d, out.size()}));
    return Down(out.data(), d, out.size());
  }

  absl::Status AllGatherInPlace(absl::Span<uint8_t> out) override {
    if (out.size() % size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all-gather: ", out.size(), " bytes do not split over ", size(),
          " ranks"));
    }
    const size_t part = out.size() / size();
    RETURN_IF_ERROR(ValidateAllGather(size(), part, out.size()));
    RETURN_IF_ERROR(Select());
    ASSIGN_OR_RETURN(uint8_t * d, Staging(a_, out.size()));
    RETURN_IF_ERROR(Up(d + rank() * part, out.data() + rank() * part, part));
    RETURN_IF_ERROR(inner_->AllGatherInPlace({d, out.size()}));
    return Down(out.data(), d, out.size());
  }

  absl::Status ReduceScatter(absl::Span<const float> in, absl::Span<float> out,
                             float scale) override {
    RETURN_IF_ERROR(ValidateReduceScatter(size(), in.size(), out.size(), scale));
    RETURN_IF_ERROR(Select());
    ASSIGN_OR_RETURN(uint8_t * din, Staging(a_, in.size() * sizeof(float)));
    ASSIGN_OR_RETURN(uint8_t * dout, Staging(b_, out.size() * sizeof(float)));
    RETURN_IF_ERROR(Up(din, in.data(), in.size() * sizeof(float)));
    RETURN_IF_ERROR(inner_->ReduceScatter(
        {reinterpret_cast<const float*>(din), in.size()},
        {reinterpret_cast<float*>(dout), out.size()}, scale));
    return Down(out.data(), dout, out.size() * sizeof(float));
  }

  absl::Status Broadcast(std::string* bytes, int root) override {
    RETURN_IF_ERROR(Select());
    return inner_->Broadcast(bytes, root);
  }
  absl::Status Barrier() override {
    RETURN_IF_ERROR(Select());
    return inner_->Barrier();
  }

 protected:
  absl::Status AllReduceHost(ReduceType type, void* values, size_t count,
                             ReduceOp op) override {
    RETURN_IF_ERROR(Select());
    switch (type) {
      case ReduceType::kF32:
        return inner_->AllReduce({static_cast<float*>(values), count}, op);
      case ReduceType::kF64:
        return inner_->AllReduce({static_cast<double*>(values), count}, op);
      case ReduceType::kI64:
        return inner_->AllReduce({static_cast<int64_t*>(values), count}, op);
      case ReduceType::kU64:
        return inner_->AllReduce({static_cast<uint64_t*>(values), count}, op);
    }
    return absl::InvalidArgumentError("nccl-host: unknown reduce type");
  }

 private:
  // The engine's threads differ from the creating one: the device is per
  // thread in the CUDA runtime.
  absl::Status Select() { return Cuda(cudaSetDevice(inner_->device()), "device"); }
  // Host to device on the group's stream (ordered before the collective).
  absl::Status Up(void* d, const void* h, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    return Cuda(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice,
                                inner_->stream()),
                "copying to the device");
  }
  // Waits for the collective with the group's deadline (aborting a stuck
  // communicator), then copies the result down.
  absl::Status Down(void* h, const void* d, size_t bytes) {
    RETURN_IF_ERROR(inner_->Synchronize());
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost,
                                         inner_->stream()),
                         "copying to the host"));
    return Cuda(cudaStreamSynchronize(inner_->stream()), "copying to the host");
  }

  std::unique_ptr<NcclWorkerGroup> inner_;
  // Device staging that only grows; a growth waits for the group's stream.
  absl::StatusOr<uint8_t*> Staging(DeviceScratch& s, size_t bytes) {
    RETURN_IF_ERROR(s.Reserve(bytes, inner_->stream()));
    return static_cast<uint8_t*>(s.data());
  }
  DeviceScratch a_, b_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerGroup>> CreateHostStagedNcclGroup(
    int rank, int size, RendezvousStore* store, const GroupOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<NcclWorkerGroup> inner,
                   NcclWorkerGroup::Create(rank, size, store, options));
  return std::unique_ptr<WorkerGroup>(
      new HostStagedNcclGroup(std::move(inner)));
}

}  // namespace zeroshard
