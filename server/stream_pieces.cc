#include "server/stream_pieces.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "optim/grad_scan.h"
#include "wire/proto_convert.h"
#include "wire/push_grad_codec.h"

namespace zeroshard {

absl::Status StreamPieces::Add(const ModelShard& state, uint64_t offset,
                               v1::DType wire_dtype, std::string* data,
                               Checks checks) {
  if (wire_dtype != v1::DTYPE_FP32 && wire_dtype != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        rpc_, ": piece at offset ", offset, " has dtype ",
        v1::DType_IsValid(wire_dtype) ? v1::DType_Name(wire_dtype)
                                      : absl::StrCat(wire_dtype),
        "; want DTYPE_FP32 or DTYPE_BF16", tail_));
  }
  ASSIGN_OR_RETURN(const DType dtype, FromProto(wire_dtype));
  const size_t esize = DTypeSize(dtype);
  const size_t bytes = data->size();
  if ((bytes == 0 && !checks.allow_empty) || bytes > kMaxPiecePayloadBytes ||
      bytes % esize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        rpc_, ": piece at offset ", offset, " carries ", bytes,
        " bytes; want a ", checks.allow_empty ? "" : "positive ",
        "multiple of ", esize, " (", DTypeName(dtype), ") of at most ",
        kMaxPiecePayloadBytes, tail_));
  }
  const uint64_t n = bytes / esize;
  RETURN_IF_ERROR(state.CheckOwned(offset, n, absl::StrCat(rpc_, ": piece")));
  if (n == 0) return absl::OkStatus();
  const FlatRange range{offset, offset + n};
  auto next = ranges_.lower_bound(range.begin);
  if ((next != ranges_.end() && next->first < range.end) ||
      (next != ranges_.begin() && std::prev(next)->second > range.begin)) {
    return absl::InvalidArgumentError(
        absl::StrCat(rpc_, ": piece [", range.begin, ", ", range.end,
                     ") overlaps another piece of the same stream", tail_));
  }
  // Cannot trigger while pieces are disjoint and owned; kept as the stated
  // bound.
  const uint64_t cap = state.owned().size() * sizeof(float);
  if (bytes_ + bytes > cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        rpc_, ": the stream would buffer ", bytes_ + bytes,
        " bytes, more than the owned range's ", cap, tail_));
  }
  if (checks.finite) {
    const GradView values{data->data(), dtype == DType::kBf16};
    if (!ScanGrad(values, n).finite()) {
      return absl::InvalidArgumentError(absl::StrCat(
          rpc_, ": piece [", range.begin, ", ", range.end,
          ") holds NaN or Inf at ",
          state.DescribeElement(range.begin + FirstNonFinite(values, n)),
          tail_));
    }
  }
  ranges_.emplace(range.begin, range.end);
  bytes_ += bytes;
  pieces_.push_back({range, dtype, std::move(*data)});
  return absl::OkStatus();
}

void StreamPieces::Clear() {
  pieces_.clear();
  ranges_.clear();
  bytes_ = 0;
}

}  // namespace zeroshard
