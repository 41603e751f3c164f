// The commit marker of a checkpoint: one JSON file naming every shard file
// with its checksum, written last and atomically, so that a checkpoint
// either has a complete manifest or does not exist.
//
// A checkpoint directory holds one folder per step:
//   <dir>/step-00000000000000000030/shard-0-of-2.bin  (shard_checkpoint.h)
//   <dir>/step-00000000000000000030/shard-1-of-2.bin
//   <dir>/step-00000000000000000030/MANIFEST.json     (written last)
//
//   CheckpointManifest m{.step = 30, .num_servers = 2, ...};
//   m.shards.push_back({0, {0, n0}, "shard-0-of-2.bin", sum0, bytes0});
//   RETURN_IF_ERROR(WriteCheckpointManifest(dir, m));
//   ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCheckpoints(dir));
//   ASSIGN_OR_RETURN(CheckpointManifest newest, ReadCheckpointManifest(dir,
//                                                                steps.back()));
//
// Contracts:
// - A manifest is valid only if its shards are exactly servers 0..S-1, in
//   order, with disjoint owned ranges that cover [0, total_elems) without a
//   gap; file names are plain names inside the step folder (no '/', no
//   ".."). Writing or reading anything else is INVALID_ARGUMENT / DATA_LOSS.
// - ListCheckpoints returns, oldest first, the steps whose MANIFEST.json
//   exists and parses as a valid manifest for that step; a folder without
//   one (a checkpoint still being written, or cut short by a crash) is not
//   a checkpoint. It does not verify the shard files: the reader does that
//   (VerifyShardCheckpoint) before loading any of them.
// - PruneCheckpoints keeps the newest `keep_last` complete checkpoints and
//   removes older folders, complete or not; folders newer than the newest
//   complete one (possibly being written now) are left alone. It trusts the
//   manifests: call it after the newest checkpoint's shard files have been
//   verified, or the only good checkpoint may be the one it removes.
#ifndef ZEROSHARD_COMMON_CHECKPOINT_MANIFEST_H_
#define ZEROSHARD_COMMON_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/layout.h"
#include "common/loss_scaler.h"

namespace zeroshard {

inline constexpr int kCheckpointManifestVersion = 1;
inline constexpr char kCheckpointManifestName[] = "MANIFEST.json";

struct CheckpointShardEntry {
  uint32_t server_index = 0;
  FlatRange owned;
  std::string file;        // inside the step folder
  uint64_t checksum = 0;   // XXH3-64, as in the file's trailer
  uint64_t bytes = 0;      // the file's size
};

struct CheckpointManifest {
  uint64_t step = 0;                // every shard is at this version
  uint32_t num_servers = 0;
  uint64_t total_elems = 0;         // the flat space the shards cover
  uint64_t model_fingerprint = 0;  // as in each shard's header
  uint64_t config_fingerprint = 0;  // ConfigFingerprint of the run
  // The model manifest the flat offsets refer to (partition_count is the
  // writing run's worker count): with num_servers, the writing layout.
  ModelManifest model;
  LossScalerState loss_scaler;
  uint64_t data_position = 0;       // batches consumed (the sampler is
                                    // deterministic in the step)
  // The step the writing run's learning-rate schedule ended at (its
  // total_steps; 0: not recorded, a manifest written before it was), so a
  // launcher extending the run can say that the schedule changes.
  uint64_t schedule_total_steps = 0;
  // The optimizer the shard files were written under: the wire's
  // OptimizerConfig as protobuf's JSON text (wire/optimizer_difference.h
  // reads it), so that a launcher can check a resume's optimizer before
  // it starts anything. "": not recorded (a manifest written before it
  // was); the servers' restore still checks.
  std::string optimizer_json;
  std::vector<CheckpointShardEntry> shards;
};

// "step-00000000000000000030": fixed width (any uint64_t), so names sort by
// step.
std::string CheckpointFolderName(uint64_t step);

// A --resume argument: a checkpoint directory (its newest complete
// checkpoint) or one step folder in it ("DIR/step-00000000000000000020":
// that checkpoint): the directory, and the folder's step.
struct ResumePoint {
  std::string dir;
  std::optional<uint64_t> step;
};
ResumePoint ParseResumePath(const std::string& path);

// "shard-1-of-2.bin": server k of S's file in a step folder.
std::string ShardFileName(uint32_t server_index, uint32_t num_servers);

absl::Status ValidateCheckpointManifest(const CheckpointManifest& manifest);

std::string CheckpointManifestJson(const CheckpointManifest& manifest);
absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(
    std::string_view text);

// Writes <dir>/<folder>/MANIFEST.json atomically (the folder must exist:
// the shard files are in it already).
absl::Status WriteCheckpointManifest(const std::string& dir,
                                     const CheckpointManifest& manifest);
// NOT_FOUND when the step has no manifest; DATA_LOSS when it does not parse
// or is not valid for that step.
absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(
    const std::string& dir, uint64_t step);

absl::StatusOr<std::vector<uint64_t>> ListCheckpoints(const std::string& dir);

absl::Status PruneCheckpoints(const std::string& dir, int keep_last);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_CHECKPOINT_MANIFEST_H_
