// The flat layout: the one place that does index arithmetic on the flat
// parameter space.
//
// A model manifest is an ordered list of units, each an ordered list of named
// tensors. The flat space is the concatenation of the units; each unit is
// padded to a multiple of 64 * partition_count elements so that it splits
// evenly over partition_count workers at a 64-element alignment. Padding
// elements exist on the servers and stay zero.
//
//   Server k of S owns [Align64(k * total / S), Align64((k+1) * total / S)),
//   each boundary moved to the nearer 64-aligned offset outside any tensor
//   marked keep_whole (so such a tensor lies on one server).
//   Worker r of N owns [r * len / N, (r+1) * len / N) of every unit.
//
//   ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, S, N));
//   for (const FlatRange& part : layout.WorkerRanges(r))
//     for (const ServerSlice& s : layout.SplitByServer(part)) ...
#ifndef ZEROSHARD_COMMON_LAYOUT_H_
#define ZEROSHARD_COMMON_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace zeroshard {

// Alignment, in elements, of every unit boundary, worker partition and server
// range.
inline constexpr uint64_t kFlatAlignment = 64;

// How a server fills a tensor's initial master weights (common/init_values.h):
// normal draws with the Init request's std divided by std_divisor, zeros or
// ones. The architecture states it per tensor (model/arch.h), so the servers
// match no tensor names.
struct InitRule {
  enum class Kind { kNormal = 0, kZeros = 1, kOnes = 2 };
  Kind kind = Kind::kNormal;
  double std_divisor = 1.0;  // kNormal only; finite and > 0
};

// The parameter class of a tensor, which names its parameter group
// (common/param_groups.h); the architecture states it per tensor.
enum class TensorClass { kMatrix = 0, kEmbedding = 1, kBias = 2, kNorm = 3 };
inline constexpr int kNumTensorClasses = 4;

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitRule init;
  TensorClass param_class = TensorClass::kMatrix;
  // No server boundary falls inside this tensor: for update rules that need
  // a whole matrix on one server (docs/DESIGN.md, "Whole tensors").
  bool keep_whole = false;
};

struct UnitSpec {
  std::string name;
  std::vector<TensorSpec> tensors;
};

struct ModelManifest {
  std::vector<UnitSpec> units;
  // Units are padded to split evenly over this many workers; >= 1.
  uint32_t partition_count = 1;
  // The architecture that made it (model/arch.h), carried for the tools
  // that read a manifest back from the servers; the servers never read it.
  std::string arch;
};

// The first unit at which `a` and `b` differ in their tensors' names or
// shapes (or in the unit count: the shorter's size), or nullopt when every
// unit holds the same tensors: whether a layout is the manifest a model
// shape makes, whatever the padding or the keep_whole marks.
std::optional<size_t> FirstDifferingUnit(const ModelManifest& a, const ModelManifest& b);

// A half-open range [begin, end) of flat element offsets.
struct FlatRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool Contains(const FlatRange& r) const {
    return r.begin >= begin && r.end <= end;
  }
  friend bool operator==(const FlatRange& a, const FlatRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// Intersection of two ranges (empty when disjoint: begin == end).
FlatRange Intersect(const FlatRange& a, const FlatRange& b);

// OK when no two of `ranges` share an element (empty ranges share none);
// otherwise INVALID_ARGUMENT "ranges [a, b) and [c, d) overlap".
absl::Status CheckDisjoint(absl::Span<const FlatRange> ranges);

// Placement of one tensor in the flat space.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  uint64_t offset = 0;  // global flat offset of element 0
  int unit = 0;         // index into FlatLayout::units()
  InitRule init;
  TensorClass param_class = TensorClass::kMatrix;
  bool keep_whole = false;
  FlatRange range() const { return {offset, offset + numel}; }
};

// Placement of one unit in the flat space.
struct UnitInfo {
  std::string name;
  uint64_t offset = 0;      // global flat offset of the unit
  uint64_t numel = 0;       // sum of its tensors' elements
  uint64_t padded = 0;      // numel rounded up; a multiple of 64 * partitions
  std::vector<int> tensors; // indices into FlatLayout::tensors()
  FlatRange range() const { return {offset, offset + padded}; }
};

// A piece of a flat range that falls on one server.
struct ServerSlice {
  int server = 0;
  FlatRange range;
};

class FlatLayout {
 public:
  // Validates the manifest (non-empty, unique names, positive dimensions,
  // no overflow) and computes the layout for S servers and N workers. N must
  // divide manifest.partition_count. Server boundaries avoid the insides of
  // keep_whole tensors (WholeTensorCut); a server may own nothing when one
  // such tensor is larger than total / S.
  static absl::StatusOr<FlatLayout> Create(const ModelManifest& manifest,
                                           uint32_t num_servers,
                                           uint32_t num_workers);

  const ModelManifest& manifest() const { return manifest_; }
  uint32_t num_servers() const { return num_servers_; }
  uint32_t num_workers() const { return num_workers_; }
  // Padded length of the flat space.
  uint64_t total_elems() const { return total_; }
  // Elements that belong to tensors (total minus padding).
  uint64_t param_elems() const { return params_; }

  const std::vector<UnitInfo>& units() const { return units_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Index of the named tensor, or NOT_FOUND.
  absl::StatusOr<int> FindTensor(absl::string_view name) const;

  // The range server k owns.
  FlatRange ServerRange(uint32_t server) const;
  // The server owning a flat offset (< total_elems()).
  uint32_t ServerOf(uint64_t offset) const;
  // Worker r's partition of unit u.
  FlatRange WorkerUnitRange(uint32_t worker, int unit) const;
  // Worker r's partitions of every unit, in unit order.
  std::vector<FlatRange> WorkerRanges(uint32_t worker) const;
  // The elements of those partitions together.
  uint64_t WorkerElems(uint32_t worker) const;
  // Splits a range (inside [0, total)) at server boundaries, in order.
  std::vector<ServerSlice> SplitByServer(const FlatRange& range) const;

 private:
  FlatLayout() = default;

  ModelManifest manifest_;
  uint32_t num_servers_ = 1;
  uint32_t num_workers_ = 1;
  uint64_t total_ = 0;
  uint64_t params_ = 0;
  std::vector<UnitInfo> units_;
  std::vector<TensorInfo> tensors_;
  std::vector<uint64_t> server_begin_;  // S + 1 boundaries
};

// FNV-1a over the units' and tensors' names and shapes, in order: the model,
// independent of the padding (partition_count) and of any server count.
uint64_t ModelFingerprint(const ModelManifest& manifest);

// A run of `size` elements at `from` in one layout that sits at `to` in
// another.
struct FlatMove {
  uint64_t from = 0;
  uint64_t to = 0;
  uint64_t size = 0;
};

// Where the tensor elements of `to_range` (a range of layout `to`) live in
// layout `from`, ordered by `to`; padding elements of `to` map nowhere. The
// two layouts must hold the same model (equal ModelFingerprint; checked:
// INVALID_ARGUMENT otherwise), padded for any worker counts and split over
// any server counts.
absl::StatusOr<std::vector<FlatMove>> MapBetweenLayouts(const FlatLayout& from,
                                                        const FlatLayout& to,
                                                        FlatRange to_range);

// The range server k of S owns in a flat space of `total` elements with no
// keep_whole tensor, derived from (total, S) alone.
FlatRange ServerRangeFor(uint64_t total, uint32_t num_servers,
                         uint32_t server);

// The server boundary nearest `ideal` (a multiple of kFlatAlignment inside
// [0, total]) that lies inside none of `whole` (sorted, disjoint ranges, each
// inside a unit whose padded end is a multiple of kFlatAlignment): `ideal`
// itself when no range holds it strictly inside, else the nearer of the
// aligned offsets below and above the run of ranges around it (the lower on
// a tie).
uint64_t WholeTensorCut(absl::Span<const FlatRange> whole, uint64_t ideal);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_LAYOUT_H_
