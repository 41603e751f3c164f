// The shard checkpoint reader (server/shard_checkpoint.h): any file bytes
// through VerifyShardCheckpoint, and ReadShardCheckpointRange on what it
// accepts. A random file almost never carries a matching XXH3 trailer, so
// the harness can write the right one (flag bit 0) and reach the header
// parsing and the size checks behind it.
// Input: a flags byte, 16 bytes choosing a range to read, then the file.
// Checked: an accepted file's size is what its header implies; reads inside
// the owned range succeed, reads outside it are INVALID_ARGUMENT.
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/shard_checkpoint.h"
#include "tests/fuzz/fuzz_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace zeroshard::fuzz {
namespace {

constexpr uint64_t kMaxReadElems = uint64_t{1} << 16;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "shard_checkpoint: %s\n", what);
  std::abort();
}

void Run(const uint8_t* data, size_t size) {
  QuietProtobuf();
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const uint64_t pick_begin = in.Uint(8), pick_len = in.Uint(8);
  std::string file(in.Rest());
  if ((flags & 1) && file.size() >= 8) {
    const uint64_t sum = XXH3_64bits(file.data(), file.size() - 8);
    std::memcpy(file.data() + file.size() - 8, &sum, 8);
  }
  MemFile f(file);
  absl::StatusOr<ShardCheckpointInfo> info = VerifyShardCheckpoint(f.path());
  if (!info.ok()) return;
  const uint64_t n = info->header.owned().length();
  const uint64_t arrays = 1 + ShardCheckpointSlots(info->header).size();
  if (info->file_bytes != file.size() ||
      info->arrays_offset + 4 * arrays * n + 8 != file.size() ||
      n > file.size() / (4 * arrays)) {
    Fail("accepted a file whose size is not what its header implies");
  }
  const uint64_t begin = info->header.owned().offset();
  const size_t which = flags >> 1 & 3;  // 0 master, 1 + k slot k
  // A range inside the owned one (clamped), and the same shifted past it.
  const uint64_t rb = begin + (n == 0 ? 0 : pick_begin % n);
  const uint64_t rl =
      std::min<uint64_t>({pick_len % (kMaxReadElems + 1), begin + n - rb});
  std::vector<float> out(std::max<uint64_t>(rl, 1));
  absl::Status s = ReadShardCheckpointRange(f.path(), *info, which,
                                            {rb, rb + rl}, out.data());
  if (which < arrays && !s.ok()) {
    Fail("a read inside the owned range failed");
  }
  const uint64_t past = begin + n;
  s = ReadShardCheckpointRange(f.path(), *info, /*master=*/0,
                               {past, past + 1}, out.data());
  if (!absl::IsInvalidArgument(s) && past + 1 > past) {
    Fail("a read past the owned range was not INVALID_ARGUMENT");
  }
}

}  // namespace
}  // namespace zeroshard::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zeroshard::fuzz::Run(data, size);
  return 0;
}
