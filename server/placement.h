// Where a shard keeps its state: ordinary host RAM, pinned host RAM
// (cudaHostAlloc, for fast GPU transfers) or GPU memory (cudaMalloc on the
// device SelectStateDevice chose; only device_transfer.h's calls touch it).
//
// StateBuffer is one allocation of a placement, freed on destruction. Host
// buffers are 64-byte aligned and not touched here: the owner's first write
// (the init fill) places the pages. Pinned buffers come from the CUDA runtime
// and exist only when the build has CUDA (ZS_HAVE_CUDA) and the machine has a
// CUDA device; otherwise allocation fails with FAILED_PRECONDITION naming the
// --placement flag. There is no silent fallback to another placement.
//
//   ASSIGN_OR_RETURN(Placement p, ParsePlacement("pinned"));
//   RETURN_IF_ERROR(CheckPlacementAvailable(p));
//   ASSIGN_OR_RETURN(StateBuffer b, StateBuffer::Allocate(p, bytes));
#ifndef ZEROSHARD_SERVER_PLACEMENT_H_
#define ZEROSHARD_SERVER_PLACEMENT_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config_enums.h"

namespace zeroshard {

// Placement itself and its names ("host", "pinned", "device") are
// common/config_enums.h's, shared with the JSON configuration.
// Parses the --placement flag value; INVALID_ARGUMENT naming the flag.
absl::StatusOr<Placement> ParsePlacement(absl::string_view name);

// OK when buffers of this placement can be allocated on this machine;
// FAILED_PRECONDITION naming --placement otherwise ("pinned" and "device"
// need CUDA in the build and the selected device: device_transfer.h).
absl::Status CheckPlacementAvailable(Placement placement);

// One owned allocation. Move-only.
class StateBuffer {
 public:
  StateBuffer() = default;
  ~StateBuffer();
  StateBuffer(StateBuffer&& other) noexcept;
  StateBuffer& operator=(StateBuffer&& other) noexcept;
  StateBuffer(const StateBuffer&) = delete;
  StateBuffer& operator=(const StateBuffer&) = delete;

  // Allocates `bytes` (rounded up to 64) of the placement; the contents are
  // unspecified. RESOURCE_EXHAUSTED when the allocation fails.
  static absl::StatusOr<StateBuffer> Allocate(Placement placement,
                                              size_t bytes);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Placement placement_ = Placement::kHost;
  int device_ = 0;  // kDevice: the CUDA device it was allocated on
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_PLACEMENT_H_
