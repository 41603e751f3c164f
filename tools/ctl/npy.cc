#include "tools/ctl/npy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"

namespace zeroshard::ctl {

std::string NpyHeader(const std::vector<int64_t>& shape) {
  // A 1-tuple needs its trailing comma: (n,).
  const std::string dims = shape.size() == 1
                               ? absl::StrCat(shape[0], ",")
                               : absl::StrJoin(shape, ", ");
  std::string dict = absl::StrCat(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  const size_t prefix = 6 + 2 + 2;  // magic, version, u16 length
  size_t total = prefix + dict.size() + 1;  // + '\n'
  const size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  const uint16_t len = static_cast<uint16_t>(dict.size());
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  return out + dict;
}

absl::Status WriteNpyF32(const std::string& path,
                         const std::vector<int64_t>& shape,
                         absl::Span<const float> values) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  if (n != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy: shape (", absl::StrJoin(shape, ", "), ") holds ", n,
        " elements, got ", values.size()));
  }
  const std::string header = NpyHeader(shape);
  if (header.size() - 10 > 0xffff) {
    return absl::InvalidArgumentError("npy: header too long for format 1.0");
  }
  ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Open(path));
  RETURN_IF_ERROR(w.Append(header.data(), header.size()));
  RETURN_IF_ERROR(w.Append(values.data(), values.size() * sizeof(float)));
  return w.Commit();
}

}  // namespace zeroshard::ctl
