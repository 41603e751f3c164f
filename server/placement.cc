#include "server/placement.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/device_transfer.h"

#if ZS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zeroshard {
namespace {

constexpr size_t kAlignment = 64;

}  // namespace

absl::StatusOr<Placement> ParsePlacement(absl::string_view name) {
  if (std::optional<Placement> p = ValueOf(kPlacementNames, name)) return *p;
  return absl::InvalidArgumentError(
      absl::StrCat("--placement='", name, "' is not one of ",
                   absl::StrJoin(NamesOf(kPlacementNames), ", ")));
}

absl::Status CheckPlacementAvailable(Placement placement) {
  if (placement == Placement::kHost) return absl::OkStatus();
  const char* name = NameOf(kPlacementNames, placement);
#if ZS_HAVE_CUDA
  int count = 0;  // not written by the runtime when it fails
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count <= StateDevice()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--placement=", name, " needs a CUDA device, but device ",
        StateDevice(), " is not usable (",
        err != cudaSuccess ? cudaGetErrorString(err)
                           : absl::StrCat(count, " devices").c_str(),
        "); use --placement=host"));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "--placement=", name,
      " needs CUDA, and this zeroshard-server was built without it; use "
      "--placement=host"));
#endif
}

StateBuffer::~StateBuffer() { Release(); }

StateBuffer::StateBuffer(StateBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      placement_(other.placement_),
      device_(other.device_) {}

StateBuffer& StateBuffer::operator=(StateBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    placement_ = other.placement_;
    device_ = other.device_;
  }
  return *this;
}

void StateBuffer::Release() {
  if (data_ == nullptr) return;
#if ZS_HAVE_CUDA
  if (placement_ == Placement::kPinned) {
    cudaFreeHost(data_);
    data_ = nullptr;
    return;
  }
  if (placement_ == Placement::kDevice) {
    cudaSetDevice(device_);
    cudaFree(data_);
    data_ = nullptr;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

absl::StatusOr<StateBuffer> StateBuffer::Allocate(Placement placement,
                                                  size_t bytes) {
  const absl::Status available = CheckPlacementAvailable(placement);
  if (!available.ok()) return available;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  StateBuffer buffer;
  buffer.placement_ = placement;
  buffer.bytes_ = bytes;
  if (rounded == 0) return buffer;
  if (placement == Placement::kPinned) {
#if ZS_HAVE_CUDA
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, rounded, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cudaHostAlloc of ", rounded,
                       " bytes failed: ", cudaGetErrorString(err)));
    }
    buffer.data_ = p;
    return buffer;
#endif
  }
  if (placement == Placement::kDevice) {
#if ZS_HAVE_CUDA
    buffer.device_ = StateDevice();
    const cudaError_t set = cudaSetDevice(buffer.device_);
    void* p = nullptr;
    const cudaError_t err = set != cudaSuccess ? set : cudaMalloc(&p, rounded);
    if (err != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cudaMalloc of ", rounded, " bytes on device ", buffer.device_,
          " failed: ", cudaGetErrorString(err),
          " (add servers, or use --placement=pinned)"));
    }
    buffer.data_ = p;
    return buffer;
#endif
  }
  buffer.data_ = std::aligned_alloc(kAlignment, rounded);
  if (buffer.data_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocation of ", rounded, " bytes of host memory failed"));
  }
  return buffer;
}

}  // namespace zeroshard
