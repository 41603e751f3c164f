// Hugging Face safetensors files: a writer (FP32 tensors) and a reader that
// validates the whole header before it reads a byte of tensor data.
//
// The format (https://github.com/huggingface/safetensors):
//   8 bytes   N, little-endian u64: the header's length
//   N bytes   JSON: {"NAME": {"dtype": "F32", "shape": [2, 3],
//                             "data_offsets": [BEGIN, END]}, ...,
//                    "__metadata__": {"key": "value", ...}}   (optional)
//             starting with '{', padded with spaces
//   the rest  the data buffer; [BEGIN, END) are byte offsets into it,
//             little-endian, row-major
//
//   RETURN_IF_ERROR(WriteSafetensors(path, {{"w", {2, 3}, values}},
//                                    {{"format", "pt"}}));
//   ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::Open(path));
//   for (const SafetensorsEntry& e : r.index().tensors) {
//     std::vector<float> v(e.numel);
//     RETURN_IF_ERROR(r.ReadFp32(e, absl::MakeSpan(v)));
//   }
//
// Validation, as the reference implementation does it: the header length
// fits in the file (and under 100 MB); the header is a JSON object starting
// with '{' with no name twice; every entry has exactly "dtype", "shape" and
// "data_offsets"; the dtype is a safetensors dtype; dimensions are
// non-negative and their product times the dtype's size is END - BEGIN
// without overflow; the entries, in order of BEGIN, tile the data buffer
// exactly (no overlap, no hole, nothing after the last); "__metadata__"
// maps strings to strings.
//
// Errors name the file and, where one is at fault, the tensor:
//   NOT_FOUND / PERMISSION_DENIED  the file cannot be opened;
//   DATA_LOSS         the file is not a valid safetensors file (cut short,
//                     header length beyond the file, bad JSON, unknown
//                     dtype, shape and byte count disagree, offsets outside
//                     the buffer, overlapping or with holes, a duplicate
//                     name), or it changed while being read;
//   INVALID_ARGUMENT  a valid file asked for what this code does not do
//                     (ReadFp32 of a dtype other than F32, BF16 or F16), or
//                     a bad tensor handed to the writer.
#ifndef ZEROSHARD_COMMON_SAFETENSORS_H_
#define ZEROSHARD_COMMON_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace zeroshard {

// The dtypes of the safetensors format.
enum class SafetensorsDType {
  kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kF64, kI64, kU64,
};

// "F32", "BF16", ...: the name in the header.
absl::string_view SafetensorsDTypeName(SafetensorsDType dtype);
// Bytes per element.
size_t SafetensorsDTypeSize(SafetensorsDType dtype);

// The longest header read (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One tensor of a file, validated.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  // Byte range in the data buffer (the file from data_offset on).
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsIndex {
  // In data order (ascending begin; ties by name).
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  // Where the data buffer starts in the file: 8 + the header length.
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;

  // The named tensor, or null.
  const SafetensorsEntry* Find(absl::string_view name) const;
};

// Validates a header (the N bytes after the length) for a data buffer of
// `data_bytes`; `file` names the file in errors.
absl::StatusOr<SafetensorsIndex> ParseSafetensorsHeader(
    absl::string_view header, uint64_t data_bytes, absl::string_view file);

// An FP32 tensor to write, in the caller's memory (which must stay valid
// through the call); data.size() must be the product of shape.
struct SafetensorsTensorView {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<const float> data;
};

// An FP32 tensor owning its values.
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// The padded header (JSON, spaces to a multiple of 8) WriteSafetensors
// writes after the length for these tensors, stored in the order given.
// INVALID_ARGUMENT for an empty or repeated name, "__metadata__" as a name,
// a negative dimension, or a size that does not match the shape.
absl::StatusOr<std::string> SafetensorsHeader(
    absl::Span<const SafetensorsTensorView> tensors,
    const std::map<std::string, std::string>& metadata);

// Writes `tensors` as F32 to `path` through AtomicFileWriter
// (common/atomic_file.h): a reader sees the old file or the whole new one.
absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const SafetensorsTensorView> tensors,
    const std::map<std::string, std::string>& metadata = {});

// An open, validated safetensors file. Move-only; closes the file on
// destruction. Reads with pread, so const methods may run concurrently.
class SafetensorsReader {
 public:
  // Opens `path` (a regular file), reads and validates its header.
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  const SafetensorsIndex& index() const { return index_; }

  // Reads `entry` (one of index().tensors) into `out` (exactly entry.numel
  // floats), widening BF16 and F16 exactly. INVALID_ARGUMENT for another
  // dtype or a wrong output size; DATA_LOSS when the file is shorter than
  // it was at Open.
  absl::Status ReadFp32(const SafetensorsEntry& entry,
                        absl::Span<float> out) const;

 private:
  SafetensorsReader(std::string path, int fd, SafetensorsIndex index)
      : path_(std::move(path)), fd_(fd), index_(std::move(index)) {}
  absl::Status ReadBytes(uint64_t offset, void* dst, size_t bytes,
                         const std::string& what) const;

  std::string path_;
  int fd_ = -1;
  SafetensorsIndex index_;
};

// Every tensor of `path` as FP32, in data order; the metadata into
// `*metadata` when given.
absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensorsFp32(
    const std::string& path,
    std::map<std::string, std::string>* metadata = nullptr);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_SAFETENSORS_H_
