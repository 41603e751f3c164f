// The safetensors reader (common/safetensors.h): a header alone through
// ParseSafetensorsHeader for a data buffer of a fuzzed size, or a whole
// file through SafetensorsReader::Open and ReadFp32 of every tensor.
// Input: a mode byte; mode even: 4 bytes of data-buffer size, then the
// header; mode odd: the file.
// Checked: an accepted index tiles its data buffer exactly (entries in
// order, no overlap or hole, each numel * dtype size bytes); a valid file's
// F32/BF16/F16 tensors all read.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "tests/fuzz/fuzz_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace zeroshard::fuzz {
namespace {

constexpr uint64_t kMaxReadElems = uint64_t{1} << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "safetensors: %s\n", what);
  std::abort();
}

void CheckIndex(const SafetensorsIndex& index, uint64_t data_bytes) {
  uint64_t at = 0;
  for (const SafetensorsEntry& e : index.tensors) {
    if (e.begin != at || e.end < e.begin)
      Fail("entries do not tile the buffer");
    if (e.numel * SafetensorsDTypeSize(e.dtype) != e.end - e.begin) {
      Fail("an entry's size disagrees with its shape");
    }
    at = e.end;
  }
  if (at != data_bytes) Fail("entries do not cover the buffer");
}

void Run(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t mode = in.Byte();
  if (mode % 2 == 0) {
    const uint64_t data_bytes = in.Uint(4);
    const std::string_view header = in.Rest();
    absl::StatusOr<SafetensorsIndex> index = ParseSafetensorsHeader(
        absl::string_view(header.data(), header.size()), data_bytes, "fuzz");
    if (index.ok()) CheckIndex(*index, data_bytes);
    return;
  }
  const std::string_view file = in.Rest();
  MemFile f(file);
  absl::StatusOr<SafetensorsReader> reader = SafetensorsReader::Open(f.path());
  if (!reader.ok()) return;
  CheckIndex(reader->index(), reader->index().data_bytes);
  if (reader->index().data_offset + reader->index().data_bytes != file.size()) {
    Fail("data buffer and file size disagree");
  }
  for (const SafetensorsEntry& e : reader->index().tensors) {
    if (e.numel > kMaxReadElems) continue;
    std::vector<float> out(e.numel);
    absl::Status s = reader->ReadFp32(e, absl::MakeSpan(out));
    const bool readable = e.dtype == SafetensorsDType::kF32 ||
                          e.dtype == SafetensorsDType::kBF16 ||
                          e.dtype == SafetensorsDType::kF16;
    if (readable != s.ok()) Fail("ReadFp32 disagrees with the dtype");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
