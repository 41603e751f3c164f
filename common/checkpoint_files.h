// A checkpoint's shard files checked against its manifest without reading
// the format inside them (docs/formats/checkpoint_manifest.md): each file
// is there, has the manifest's size and ends in the manifest's checksum;
// `full` also hashes every byte (XXH3-64) and compares. The servers verify
// each file whole again before they load it; this is for tools that must
// say which checkpoint is intact before any server is involved.
//
//   ASSIGN_OR_RETURN(auto checks, CheckCheckpoints("/ckpt", /*full=*/false));
//   // newest first: {30, DATA_LOSS "shard-1-of-2.bin: ..."}, {20, OK}, ...
#ifndef ZEROSHARD_COMMON_CHECKPOINT_FILES_H_
#define ZEROSHARD_COMMON_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint_manifest.h"

namespace zeroshard {

// DATA_LOSS naming the first file that is missing, of another size, or
// (full) of another checksum than the manifest states.
absl::Status VerifyCheckpointFiles(const std::string& dir,
                                   const CheckpointManifest& manifest,
                                   bool full);

struct CheckpointCheck {
  uint64_t step = 0;
  absl::Status status;  // OK: intact
};
// Every complete checkpoint of `dir` (ListCheckpoints), newest first, with
// what VerifyCheckpointFiles says of it.
absl::StatusOr<std::vector<CheckpointCheck>> CheckCheckpoints(
    const std::string& dir, bool full);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CHECKPOINT_FILES_H_
