#include "common/layout.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

constexpr uint64_t kMaxElems = uint64_t{1} << 48;

uint64_t AlignDown(uint64_t x) { return x / kFlatAlignment * kFlatAlignment; }
uint64_t AlignUp(uint64_t x) { return AlignDown(x + kFlatAlignment - 1); }

// The range of `whole` that holds `c` strictly inside, or null.
const FlatRange* Around(absl::Span<const FlatRange> whole, uint64_t c) {
  auto it = std::upper_bound(
      whole.begin(), whole.end(), c,
      [](uint64_t x, const FlatRange& r) { return x <= r.begin; });
  if (it == whole.begin()) return nullptr;
  --it;
  return it->begin < c && c < it->end ? &*it : nullptr;
}

}  // namespace

FlatRange Intersect(const FlatRange& a, const FlatRange& b) {
  const uint64_t begin = std::max(a.begin, b.begin);
  const uint64_t end = std::min(a.end, b.end);
  if (end <= begin) return {begin, begin};
  return {begin, end};
}

absl::Status CheckDisjoint(absl::Span<const FlatRange> ranges) {
  std::vector<FlatRange> sorted;
  sorted.reserve(ranges.size());
  for (const FlatRange& r : ranges) {
    if (!r.empty()) sorted.push_back(r);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const FlatRange& a, const FlatRange& b) {
              return a.begin < b.begin;
            });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].begin < sorted[i - 1].end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranges [", sorted[i - 1].begin, ", ", sorted[i - 1].end, ") and [",
          sorted[i].begin, ", ", sorted[i].end, ") overlap"));
    }
  }
  return absl::OkStatus();
}

FlatRange ServerRangeFor(uint64_t total, uint32_t num_servers,
                         uint32_t server) {
  // total < 2^48 and S < 2^32 keep the products inside 64 bits only through
  // 128-bit arithmetic; use it.
  auto boundary = [&](uint64_t k) {
    const unsigned __int128 p =
        static_cast<unsigned __int128>(total) * k / num_servers;
    return AlignDown(static_cast<uint64_t>(p));
  };
  const uint64_t begin = server == 0 ? 0 : boundary(server);
  const uint64_t end = server + 1 >= num_servers ? total : boundary(server + 1);
  return {begin, std::max(begin, end)};
}

uint64_t WholeTensorCut(absl::Span<const FlatRange> whole, uint64_t ideal) {
  if (Around(whole, ideal) == nullptr) return ideal;
  // Each step leaves the range around the cut; the offsets move strictly
  // down (up), and a unit's start (padded end) is always a valid cut.
  uint64_t down = ideal;
  while (const FlatRange* r = Around(whole, down)) down = AlignDown(r->begin);
  uint64_t up = ideal;
  while (const FlatRange* r = Around(whole, up)) up = AlignUp(r->end);
  return ideal - down <= up - ideal ? down : up;
}

absl::StatusOr<FlatLayout> FlatLayout::Create(const ModelManifest& manifest,
                                              uint32_t num_servers,
                                              uint32_t num_workers) {
  if (num_servers == 0) {
    return absl::InvalidArgumentError("num_servers must be >= 1");
  }
  if (num_workers == 0) {
    return absl::InvalidArgumentError("num_workers must be >= 1");
  }
  if (manifest.partition_count == 0) {
    return absl::InvalidArgumentError("manifest.partition_count must be >= 1");
  }
  if (manifest.partition_count % num_workers != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_workers (", num_workers, ") must divide the manifest's ",
        "partition_count (", manifest.partition_count, ")"));
  }
  if (manifest.units.empty()) {
    return absl::InvalidArgumentError("manifest has no units");
  }
  FlatLayout layout;
  layout.manifest_ = manifest;
  layout.num_servers_ = num_servers;
  layout.num_workers_ = num_workers;
  const uint64_t pad = kFlatAlignment * manifest.partition_count;
  absl::flat_hash_set<std::string> unit_names, tensor_names;
  uint64_t offset = 0;
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    const UnitSpec& spec = manifest.units[u];
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("unit ", u, " has no name"));
    }
    if (!unit_names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate unit name '", spec.name, "'"));
    }
    if (spec.tensors.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit '", spec.name, "' has no tensors"));
    }
    UnitInfo unit;
    unit.name = spec.name;
    unit.offset = offset;
    for (const TensorSpec& t : spec.tensors) {
      if (t.name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("a tensor of unit '", spec.name, "' has no name"));
      }
      if (!tensor_names.insert(t.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate tensor name '", t.name, "'"));
      }
      uint64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d <= 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor '", t.name, "' has a non-positive dimension ", d));
        }
        if (numel > kMaxElems / static_cast<uint64_t>(d)) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", t.name, "' is too large"));
        }
        numel *= static_cast<uint64_t>(d);
      }
      const int kind = static_cast<int>(t.init.kind);
      if (kind < 0 || kind > static_cast<int>(InitRule::Kind::kOnes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' has an unknown init rule ", kind));
      }
      if (t.init.kind == InitRule::Kind::kNormal &&
          !(std::isfinite(t.init.std_divisor) && t.init.std_divisor > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "': init std_divisor ", t.init.std_divisor,
            " is not finite and > 0"));
      }
      const int cls = static_cast<int>(t.param_class);
      if (cls < 0 || cls >= kNumTensorClasses) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", t.name, "' has an unknown parameter class ", cls));
      }
      TensorInfo info;
      info.name = t.name;
      info.shape = t.shape;
      info.init = t.init;
      info.param_class = t.param_class;
      info.keep_whole = t.keep_whole;
      info.numel = numel;
      info.offset = offset + unit.numel;
      info.unit = static_cast<int>(u);
      unit.tensors.push_back(static_cast<int>(layout.tensors_.size()));
      layout.tensors_.push_back(std::move(info));
      unit.numel += numel;
      if (unit.numel > kMaxElems) {
        return absl::InvalidArgumentError(
            absl::StrCat("unit '", spec.name, "' is too large"));
      }
    }
    unit.padded = (unit.numel + pad - 1) / pad * pad;
    offset += unit.padded;
    if (offset > kMaxElems) {
      return absl::InvalidArgumentError("model is too large (> 2^48 elements)");
    }
    layout.params_ += unit.numel;
    layout.units_.push_back(std::move(unit));
  }
  layout.total_ = offset;
  // size_t: num_servers + 1 in uint32_t wraps to 0 for num_servers = 2^32 - 1
  // (found by tests/fuzz/init_fuzzer.cc).
  std::vector<FlatRange> whole;  // in flat order, as the tensors are
  for (const TensorInfo& t : layout.tensors_) {
    if (t.keep_whole) whole.push_back(t.range());
  }
  layout.server_begin_.resize(size_t{num_servers} + 1);  // [0] stays 0
  for (uint32_t k = 1; k < num_servers; ++k) {
    const uint64_t ideal = ServerRangeFor(offset, num_servers, k).begin;
    layout.server_begin_[k] =
        std::max(WholeTensorCut(whole, ideal), layout.server_begin_[k - 1]);
  }
  layout.server_begin_[num_servers] = offset;
  return layout;
}

absl::StatusOr<int> FlatLayout::FindTensor(absl::string_view name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
}

FlatRange FlatLayout::ServerRange(uint32_t server) const {
  return {server_begin_[server], server_begin_[server + 1]};
}

uint32_t FlatLayout::ServerOf(uint64_t offset) const {
  // The last boundary <= offset among servers with non-empty ranges.
  auto it = std::upper_bound(server_begin_.begin(), server_begin_.end() - 1,
                             offset);
  uint32_t k = static_cast<uint32_t>(it - server_begin_.begin()) - 1;
  while (k + 1 < num_servers_ && server_begin_[k + 1] <= offset) ++k;
  return k;
}

FlatRange FlatLayout::WorkerUnitRange(uint32_t worker, int unit) const {
  const UnitInfo& u = units_[unit];
  const uint64_t part = u.padded / num_workers_;
  return {u.offset + part * worker, u.offset + part * (worker + 1)};
}

std::vector<FlatRange> FlatLayout::WorkerRanges(uint32_t worker) const {
  std::vector<FlatRange> out;
  out.reserve(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    out.push_back(WorkerUnitRange(worker, static_cast<int>(u)));
  }
  return out;
}

uint64_t FlatLayout::WorkerElems(uint32_t worker) const {
  uint64_t n = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    n += WorkerUnitRange(worker, static_cast<int>(u)).size();
  }
  return n;
}

std::vector<ServerSlice> FlatLayout::SplitByServer(
    const FlatRange& range) const {
  std::vector<ServerSlice> out;
  if (range.empty()) return out;
  uint64_t at = range.begin;
  uint32_t k = ServerOf(at);
  while (at < range.end && k < num_servers_) {
    const FlatRange piece = Intersect(range, ServerRange(k));
    if (!piece.empty()) {
      out.push_back({static_cast<int>(k), piece});
      at = piece.end;
    }
    ++k;
  }
  return out;
}

uint64_t ModelFingerprint(const ModelManifest& manifest) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  };
  auto mix_string = [&](const std::string& s) {
    const uint64_t n = s.size();
    mix(&n, sizeof(n));
    mix(s.data(), s.size());
  };
  const uint64_t units = manifest.units.size();
  mix(&units, sizeof(units));
  for (const UnitSpec& u : manifest.units) {
    mix_string(u.name);
    const uint64_t tensors = u.tensors.size();
    mix(&tensors, sizeof(tensors));
    for (const TensorSpec& t : u.tensors) {
      mix_string(t.name);
      const uint64_t dims = t.shape.size();
      mix(&dims, sizeof(dims));
      for (int64_t d : t.shape) mix(&d, sizeof(d));
    }
  }
  return h;
}

absl::StatusOr<std::vector<FlatMove>> MapBetweenLayouts(const FlatLayout& from,
                                                        const FlatLayout& to,
                                                        FlatRange to_range) {
  if (ModelFingerprint(from.manifest()) != ModelFingerprint(to.manifest()) ||
      from.tensors().size() != to.tensors().size()) {
    return absl::InvalidArgumentError(
        "the two layouts hold different models (tensor names or shapes "
        "differ)");
  }
  if (to_range.end > to.total_elems() || to_range.begin > to_range.end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "range [", to_range.begin, ", ", to_range.end,
        ") is outside the flat space of ", to.total_elems(), " elements"));
  }
  std::vector<FlatMove> moves;
  // Tensors are in flat order in both layouts.
  for (size_t t = 0; t < to.tensors().size(); ++t) {
    const TensorInfo& dst = to.tensors()[t];
    const FlatRange r = Intersect({dst.offset, dst.offset + dst.numel},
                                  to_range);
    if (r.empty()) continue;
    const uint64_t src = from.tensors()[t].offset + (r.begin - dst.offset);
    if (!moves.empty() && moves.back().to + moves.back().size == r.begin &&
        moves.back().from + moves.back().size == src) {
      moves.back().size += r.size();  // contiguous in both
    } else {
      moves.push_back({src, r.begin, r.size()});
    }
  }
  return moves;
}

std::optional<size_t> FirstDifferingUnit(const ModelManifest& a, const ModelManifest& b) {
  const size_t n = std::min(a.units.size(), b.units.size());
  for (size_t u = 0; u < n; ++u) {
    const std::vector<TensorSpec>& x = a.units[u].tensors;
    const std::vector<TensorSpec>& y = b.units[u].tensors;
    if (x.size() != y.size()) return u;
    for (size_t t = 0; t < x.size(); ++t) {
      if (x[t].name != y[t].name || x[t].shape != y[t].shape) return u;
    }
  }
  if (a.units.size() != b.units.size()) return n;
  return std::nullopt;
}

}  // namespace zeroshard
