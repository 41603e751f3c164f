#include "client/piece_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zeroshard {

uint64_t PieceElems(DType dtype, size_t max_message_bytes) {
  const size_t size = std::max<size_t>(DTypeSize(dtype), 1);
  uint64_t elems = std::max<uint64_t>(max_message_bytes / size, 1);
  if (elems >= kFlatAlignment) elems = elems / kFlatAlignment * kFlatAlignment;
  return elems;
}

absl::Status ValidateRange(const FlatLayout& layout, const FlatRange& range) {
  if (range.empty() || range.end > layout.total_elems()) {
    return absl::InvalidArgumentError(
        absl::StrCat("flat range [", range.begin, ", ", range.end,
                     ") is empty or outside [0, ", layout.total_elems(), ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDisjoint(const FlatLayout& layout,
                              absl::Span<const FlatRange> ranges) {
  for (const FlatRange& r : ranges) {
    if (absl::Status s = ValidateRange(layout, r); !s.ok()) return s;
  }
  if (absl::Status s = CheckDisjoint(ranges); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("flat ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PlannedPiece>> PlanPieces(const FlatLayout& layout,
                                                     const FlatRange& range,
                                                     DType dtype,
                                                     size_t max_message_bytes) {
  if (dtype != DType::kFp32 && dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dtype ", DTypeName(dtype), " is not allowed here (fp32 or bf16)"));
  }
  if (max_message_bytes == 0 || max_message_bytes > kMaxClientPieceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes ", max_message_bytes,
                     " must be in [1, ", kMaxClientPieceBytes, "]"));
  }
  if (absl::Status s = ValidateRange(layout, range); !s.ok()) return s;
  const uint64_t step = PieceElems(dtype, max_message_bytes);
  const size_t esize = DTypeSize(dtype);
  std::vector<PlannedPiece> out;
  for (const ServerSlice& slice : layout.SplitByServer(range)) {
    for (uint64_t at = slice.range.begin; at < slice.range.end; at += step) {
      const uint64_t end = std::min(slice.range.end, at + step);
      out.push_back({slice.server, {at, end}, (at - range.begin) * esize});
    }
  }
  return out;
}

}  // namespace zeroshard
