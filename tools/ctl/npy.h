// NumPy .npy files (format version 1.0) of little-endian FP32 arrays:
// "\x93NUMPY", 1, 0, a u16 header length, a Python-dict header
// "{'descr': '<f4', 'fortran_order': False, 'shape': (a, b), }" padded with
// spaces and a newline so data starts at a multiple of 64, then the data,
// C order.
//
//   RETURN_IF_ERROR(WriteNpyF32("w.npy", {768, 2304}, values));
#ifndef ZEROSHARD_TOOLS_CTL_NPY_H_
#define ZEROSHARD_TOOLS_CTL_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace zeroshard::ctl {

// The bytes before the data: magic, version, length, padded header.
std::string NpyHeader(const std::vector<int64_t>& shape);

// Writes the file atomically (common/atomic_file.h). INVALID_ARGUMENT when
// values.size() is not the product of the shape.
absl::Status WriteNpyF32(const std::string& path,
                         const std::vector<int64_t>& shape,
                         absl::Span<const float> values);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_TOOLS_CTL_NPY_H_
