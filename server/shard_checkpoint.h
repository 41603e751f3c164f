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

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/atomic_file.h"
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

// Writes one shard file in file order (the prefix and header at Open, then
// the arrays' bytes as Append hands them, then the checksum at Finish)
// through one reused buffer aligned for O_DIRECT, so that the bytes go
// from the buffer to the disk without a copy into the page cache where the
// file system takes it (common/atomic_file.h). Finish refuses a body of
// any size but the one the header implies. Not thread-safe; the file
// appears at `path` only after Finish, whole.
//
//   ASSIGN_OR_RETURN(auto w, ShardFileStream::Open(path, header));
//   RETURN_IF_ERROR(w->Append(bytes, [&](char* dst, size_t at, size_t n) {
//     std::memcpy(dst, src + at, n);   // n of the request's bytes from at
//     return absl::OkStatus();
//   }));
//   ASSIGN_OR_RETURN(uint64_t checksum, w->Finish());
class ShardFileStream {
 public:
  static absl::StatusOr<std::unique_ptr<ShardFileStream>> Open(
      const std::string& path, const v1::ShardCheckpointHeader& header);
  ~ShardFileStream();
  ShardFileStream(const ShardFileStream&) = delete;
  ShardFileStream& operator=(const ShardFileStream&) = delete;

  // Appends `bytes` bytes that `fill` writes, piece by piece: each call
  // fills dst[0, n) with the request's bytes [at, at + n). A fill's error
  // ends the file (it is not written) and is returned.
  absl::Status Append(
      uint64_t bytes,
      absl::FunctionRef<absl::Status(char* dst, uint64_t at, size_t n)> fill);
  // Appends the checksum and puts the file at its path (fsynced); returns
  // the checksum.
  absl::StatusOr<uint64_t> Finish();
  // Whether the file bypassed the page cache so far (tests, benchmarks).
  bool direct() const { return file_.has_value() && file_->direct(); }

 private:
  struct Buffer;
  ShardFileStream(std::string path, AtomicFileWriter file, uint64_t body);
  // Hashes and writes the buffer's filled bytes.
  absl::Status Flush();

  const std::string path_;
  std::optional<AtomicFileWriter> file_;
  std::unique_ptr<Buffer> buffer_;
  uint64_t body_ = 0;      // the bytes from the first array to the checksum
  uint64_t appended_ = 0;  // of the body
  bool failed_ = false;
  struct Hash;
  std::unique_ptr<Hash> hash_;
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
