// One server's shard on disk: the FP32 master weights and the optimizer
// rule's state slots (AdamW: exp_avg, exp_avg_sq) of its owned range, with
// the per-chunk versions and step counts, in one file that is either whole
// and verified or refused.
//
// Layout (little-endian):
//   "ZSSHARD1"                  8 bytes, the magic and format version
//   u32 header_bytes            the size of the header that follows
//   header                      v1::ShardCheckpointHeader (protobuf)
//   f32 master[n]               n = header.owned.length
//   slot k                      for each k of header.state_slots, in order:
//                               f32[n] (FP32), or u8 codes[n] and then
//                               f32 absmax[ceil(n / 2048)] (8-bit)
//   u64 checksum                XXH3-64 of every byte before it
// The BF16 mirror is not stored: it is BF16(master), rebuilt on restore.
//
//   ShardCheckpointContents c{header, master, {exp_avg, exp_avg_sq}};
//   ASSIGN_OR_RETURN(uint64_t sum, WriteShardCheckpoint(path, c));
//   ...
//   ASSIGN_OR_RETURN(ShardCheckpointInfo info, VerifyShardCheckpoint(path));
//   RETURN_IF_ERROR(ReadShardCheckpointRange(path, info,
//       /*array=*/0, range, out));   // 0 master, 1 + k slot k
//
// Contracts:
// - Writing goes through AtomicFileWriter (common/atomic_file.h): the file
//   appears under `path` whole and fsynced, or not at all.
// - VerifyShardCheckpoint reads the whole file once and checks the sum
//   before it believes anything in the header: a missing file is NOT_FOUND;
//   a non-regular file, a wrong magic, a checksum that does not match (a
//   bit flipped anywhere, bytes cut off or added), a header that does not
//   parse or contradicts itself (chunk lists of the wrong length) or a size
//   other than the header implies is DATA_LOSS naming the file and what is
//   wrong. No array is handed out from a file that has not been verified.
// - ReadShardCheckpointRange copies elements of one array for a range
//   inside header.owned (INVALID_ARGUMENT otherwise), e.g. the part of an
//   old shard that a new server owns after resharding.
#ifndef ZEROSHARD_SERVER_SHARD_CHECKPOINT_H_
#define ZEROSHARD_SERVER_SHARD_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/layout.h"
#include "common/optimizer_config.h"
#include "proto/zeroshard/v1/checkpoint.pb.h"

namespace zeroshard {

inline constexpr char kShardCheckpointMagic[] = "ZSSHARD1";  // 8 bytes

// The state slots a header declares: its state_slots, or Adam's exp_avg and
// exp_avg_sq for a file that names none (written before slots were named).
std::vector<std::string> ShardCheckpointSlots(
    const v1::ShardCheckpointHeader& header);

// Each slot's format (header.state_slot_formats; FP32 where absent).
std::vector<SlotFormat> ShardCheckpointFormats(
    const v1::ShardCheckpointHeader& header);

// What one file holds; the arrays have header.owned().length() elements,
// `slots` one per ShardCheckpointSlots(header), each an image of
// SlotBytes(format, n) bytes (ShardStore::WriteStateImages).
struct ShardCheckpointContents {
  v1::ShardCheckpointHeader header;
  const float* master = nullptr;
  std::vector<const void*> slots;
};

// Writes `contents` to `path`; returns the file's checksum.
absl::StatusOr<uint64_t> WriteShardCheckpoint(
    const std::string& path, const ShardCheckpointContents& contents);

// A verified file's header, checksum and where its arrays start.
struct ShardCheckpointInfo {
  v1::ShardCheckpointHeader header;
  uint64_t checksum = 0;
  uint64_t file_bytes = 0;
  uint64_t arrays_offset = 0;  // byte offset of master[0]
  // The verified file's identity: a range read from any other file (one
  // renamed over it since) is refused.
  uint64_t device = 0;
  uint64_t inode = 0;
};

absl::StatusOr<ShardCheckpointInfo> VerifyShardCheckpoint(
    const std::string& path);

// Copies array `array` (0: master; 1 + k: slot k) over `range` (inside the
// header's owned range) into `out` (range.size() floats); an 8-bit slot's
// values dequantized.
absl::Status ReadShardCheckpointRange(const std::string& path,
                                      const ShardCheckpointInfo& info,
                                      size_t array, FlatRange range,
                                      float* out);

// Copies slot k's whole image (SlotBytes(format, n) bytes) into `out`.
absl::Status ReadShardCheckpointImage(const std::string& path,
                                      const ShardCheckpointInfo& info,
                                      size_t slot, void* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_CHECKPOINT_H_
