// What every binding of the extension module (python/) uses: absl::Status
// raised as zeroshard.ZeroshardError (StatusError, which PYBIND11_MODULE
// translates), wire dtypes by name, flat ranges, and checked views of
// Python buffers.
#ifndef ZEROSHARD_PYTHON_EXT_STATUS_H_
#define ZEROSHARD_PYTHON_EXT_STATUS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/layout.h"

namespace zeroshard {

namespace py = pybind11;

struct StatusError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void Raise(const absl::Status& s) {
  throw StatusError(
      absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()));
}

inline void Check(const absl::Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Value(absl::StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

inline absl::StatusOr<DType> WireDType(const std::string& name) {
  if (name == "fp32") return DType::kFp32;
  if (name == "bf16") return DType::kBf16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype \"", name, "\" is neither fp32 nor bf16"));
}

using Range = std::pair<uint64_t, uint64_t>;

inline std::vector<FlatRange> ToRanges(const std::vector<Range>& in) {
  std::vector<FlatRange> out;
  out.reserve(in.size());
  for (const auto& [b, e] : in) out.push_back(FlatRange{b, e});
  return out;
}

// A writable or readable C-contiguous buffer of exactly `bytes` bytes.
struct Bytes {
  void* data = nullptr;
  size_t size = 0;
};

inline Bytes BufferOf(const py::buffer& b, bool writable, uint64_t want_bytes,
               const char* what) {
  // PyBUF_ND | PyBUF_FORMAT | (writable) with C contiguity required.
  py::buffer_info info = b.request(writable);
  size_t bytes = static_cast<size_t>(info.itemsize);
  int64_t expect_stride = info.itemsize;
  for (int d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect_stride) {
      Raise(absl::InvalidArgumentError(
          absl::StrCat(what, ": the buffer is not C-contiguous")));
    }
    expect_stride *= info.shape[d];
    bytes *= static_cast<size_t>(info.shape[d]);
  }
  if (bytes != want_bytes) {
    Raise(absl::InvalidArgumentError(absl::StrCat(
        what, ": the buffer holds ", bytes, " bytes, the call needs ",
        want_bytes)));
  }
  return Bytes{info.ptr, bytes};
}

inline uint64_t RangesBytes(const std::vector<FlatRange>& ranges, DType dtype) {
  uint64_t n = 0;
  for (const FlatRange& r : ranges) n += r.empty() ? 0 : r.size();
  return n * DTypeSize(dtype);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_PYTHON_EXT_STATUS_H_
