#include "server/shard_restore.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checkpoint_manifest.h"
#include "common/status_macros.h"
#include "server/param_group_table.h"
#include "server/shard_checkpoint.h"
#include "wire/optimizer_difference.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

namespace fs = std::filesystem;

// One old shard file this server reads from.
struct Source {
  std::string path;
  const CheckpointShardEntry* entry = nullptr;
  ShardCheckpointInfo info;
};

// Verifies `entry`'s file and checks it against the manifest.
absl::StatusOr<ShardCheckpointInfo> VerifyAgainstManifest(
    const std::string& path, const CheckpointShardEntry& entry,
    const CheckpointManifest& m) {
  ASSIGN_OR_RETURN(ShardCheckpointInfo info, VerifyShardCheckpoint(path));
  const v1::ShardCheckpointHeader& h = info.header;
  std::string wrong;
  if (info.checksum != entry.checksum) {
    wrong = absl::StrCat("its checksum ", info.checksum,
                         " is not the manifest's ", entry.checksum);
  } else if (info.file_bytes != entry.bytes) {
    wrong = absl::StrCat("it holds ", info.file_bytes,
                         " bytes, the manifest says ", entry.bytes);
  } else if (h.step() != m.step || h.server_index() != entry.server_index ||
             h.num_servers() != m.num_servers ||
             h.owned().offset() != entry.owned.begin ||
             h.owned().length() != entry.owned.size()) {
    wrong = "its header (step, server or owned range) disagrees with the "
            "manifest";
  } else if (h.model_fingerprint() != m.model_fingerprint) {
    wrong = "it holds another model than the manifest";
  } else if (std::any_of(h.chunk_versions().begin(), h.chunk_versions().end(),
                         [&](uint64_t v) { return v != m.step; })) {
    wrong = absl::StrCat("not every chunk is at version ", m.step);
  }
  if (!wrong.empty()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", path, " is not usable: ", wrong));
  }
  return info;
}

absl::StatusOr<RestoreStats> RestoreShardAt(ModelShard& shard,
                                            const std::string& directory,
                                            std::optional<uint64_t> step);

}  // namespace

absl::StatusOr<RestoreStats> RestoreShard(ModelShard& shard,
                                          const std::string& directory,
                                          std::optional<uint64_t> step) {
  absl::StatusOr<RestoreStats> stats = RestoreShardAt(shard, directory, step);
  if (stats.ok() || step.has_value() || !absl::IsDataLoss(stats.status())) {
    return stats;
  }
  // The newest checkpoint is damaged: say what older ones there are, so
  // the way on (restore one of them by its step) is in the message.
  absl::StatusOr<std::vector<uint64_t>> steps = ListCheckpoints(directory);
  if (!steps.ok() || steps->size() < 2) return stats;
  std::vector<uint64_t> older(steps->begin(), steps->end() - 1);
  std::reverse(older.begin(), older.end());
  return absl::DataLossError(absl::StrCat(
      stats.status().message(), "; older complete checkpoints in ", directory,
      ": steps ", absl::StrJoin(older, ", "), " (zeroshard-ctl list --dir=",
      directory, " tells which are intact; restore one by its step)"));
}

namespace {

absl::StatusOr<RestoreStats> RestoreShardAt(ModelShard& shard,
                                            const std::string& directory,
                                            std::optional<uint64_t> step) {
  const absl::Time t0 = absl::Now();
  // Checked again by RestoreState, exclusively; here so that a busy shard
  // is refused before any file is read.
  RETURN_IF_ERROR(shard.CheckRestorable());
  ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCheckpoints(directory));
  if (steps.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "Restore: no complete checkpoint (a step folder with its ",
        kCheckpointManifestName, ") in ", directory));
  }
  if (!step.has_value()) {
    step = steps.back();
  } else if (!std::binary_search(steps.begin(), steps.end(), *step)) {
    return absl::NotFoundError(absl::StrCat(
        "Restore: no complete checkpoint of step ", *step, " in ", directory,
        "; complete ones: ", absl::StrJoin(steps, ", ")));
  }
  ASSIGN_OR_RETURN(CheckpointManifest m,
                   ReadCheckpointManifest(directory, *step));
  const uint64_t model = ModelFingerprint(shard.layout().manifest());
  if (ModelFingerprint(m.model) != m.model_fingerprint) {
    return absl::DataLossError(absl::StrCat(
        "Restore: the manifest of step ", *step, " in ", directory,
        " contradicts itself (model fingerprint)"));
  }
  if (m.model_fingerprint != model) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Restore: the checkpoint of step ", *step, " in ", directory,
        " holds another model (tensor names or shapes differ from this "
        "server's Init)"));
  }
  absl::StatusOr<FlatLayout> old = FlatLayout::Create(
      m.model, m.num_servers, m.model.partition_count);
  if (!old.ok() || old->total_elems() != m.total_elems) {
    return absl::DataLossError(absl::StrCat(
        "Restore: the manifest of step ", *step, " in ", directory,
        " does not describe a layout of ", m.total_elems, " elements"));
  }
  // The files are read by the old layout's boundaries: they must be the
  // ones the shards record (a manifest edited to drop a keep_whole mark,
  // say, would otherwise read elements from the wrong offsets).
  for (uint32_t k = 0; k < m.num_servers; ++k) {
    if (!(old->ServerRange(k) == m.shards[k].owned)) {
      return absl::DataLossError(absl::StrCat(
          "Restore: the manifest of step ", *step, " in ", directory,
          " records server ", k, " owning [", m.shards[k].owned.begin, ", ",
          m.shards[k].owned.end, "), but its model's layout gives [",
          old->ServerRange(k).begin, ", ", old->ServerRange(k).end, ")"));
    }
  }
  const FlatRange owned = shard.owned();
  ASSIGN_OR_RETURN(std::vector<FlatMove> moves,
                   MapBetweenLayouts(*old, shard.layout(), owned));

  // Which old files hold the elements; each is verified once.
  const fs::path folder = fs::path(directory) / CheckpointFolderName(*step);
  std::map<uint32_t, Source> sources;
  auto source_for = [&](uint32_t k) -> absl::StatusOr<Source*> {
    auto it = sources.find(k);
    if (it != sources.end()) return &it->second;
    Source src;
    src.entry = &m.shards[k];
    src.path = (folder / src.entry->file).string();
    ASSIGN_OR_RETURN(src.info, VerifyAgainstManifest(src.path, *src.entry, m));
    return &sources.emplace(k, std::move(src)).first->second;
  };
  struct Read {
    Source* source;
    FlatRange from;
    uint64_t to;
  };
  std::vector<Read> reads;
  for (const FlatMove& mv : moves) {
    uint64_t pos = mv.from;
    while (pos < mv.from + mv.size) {
      const uint32_t k = old->ServerOf(pos);
      const FlatRange piece =
          Intersect({pos, mv.from + mv.size}, old->ServerRange(k));
      ASSIGN_OR_RETURN(Source * src, source_for(k));
      reads.push_back({src, piece, mv.to + (piece.begin - mv.from)});
      pos = piece.end;
    }
  }
  if (sources.empty()) {
    // Only padding here: one file still tells the Adam step count.
    RETURN_IF_ERROR(source_for(0).status());
  }
  // The optimizer state goes on only under the same hyperparameters, and
  // every chunk of every file must agree on t (skipped steps skip all
  // chunks alike).
  uint64_t adam_t = 0;
  bool have_t = false;
  for (const auto& [k, src] : sources) {
    const v1::ShardCheckpointHeader& h = src.info.header;
    // Parameter groups count by name and settings; their ranges follow the
    // layout, which a resume may change.
    if (const std::string diff =
            OptimizerDifference(h.optimizer(), shard.request().optimizer());
        !diff.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Restore: ", src.path, " was trained with another optimizer "
          "configuration than this server's Init (checkpoint -> now: ", diff,
          "); resume with the checkpoint's values (the optimizer section and "
          "zeroshard.param_groups)"));
    }
    // The same optimizer keeps the same slots; a file must name this rule's.
    std::vector<std::string> want;
    std::vector<SlotFormat> formats;
    for (const StateSlot& slot : shard.rule().slots()) {
      want.push_back(slot.name);
      formats.push_back(slot.format);
    }
    if (ShardCheckpointSlots(h) != want || ShardCheckpointFormats(h) != formats) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Restore: ", src.path, " holds the optimizer state slots [",
          absl::StrJoin(ShardCheckpointSlots(h), ", "), "], this server's "
          "optimizer rule ", shard.rule().name(), " keeps [",
          absl::StrJoin(want, ", "), "]"));
    }
    for (uint64_t t : h.chunk_adam_steps()) {
      if (have_t && t != adam_t) {
        return absl::DataLossError(absl::StrCat(
            "Restore: the checkpoint's chunks disagree on the Adam step "
            "count (", adam_t, " and ", t, " in ", src.path, ")"));
      }
      adam_t = t;
      have_t = true;
    }
  }

  RestoreStats stats;
  for (const auto& [k, src] : sources) stats.bytes_read += src.info.file_bytes;
  // 8-bit state restores bit for bit from the file this very range wrote
  // (the same servers and workers: its blocks are this range's); into any
  // other layout its values are dequantized, moved and quantized again in
  // the new range's blocks (docs/DESIGN.md, "8-bit state").
  const bool same_range =
      sources.size() == 1 &&
      sources.begin()->second.entry->owned == owned &&
      std::all_of(moves.begin(), moves.end(),
                  [](const FlatMove& mv) { return mv.from == mv.to; });
  if (shard.rule().quantized() && same_range) {
    const Source& src = sources.begin()->second;
    std::vector<float> master(owned.size());
    RETURN_IF_ERROR(ReadShardCheckpointRange(src.path, src.info, 0, owned,
                                             master.data()));
    std::vector<std::vector<char>> images;
    std::vector<const void*> pointers;
    for (size_t k = 0; k < shard.rule().slots().size(); ++k) {
      images.emplace_back(SlotBytes(shard.rule().slots()[k].format, owned.size()));
      RETURN_IF_ERROR(ReadShardCheckpointImage(src.path, src.info, k,
                                               images.back().data()));
      pointers.push_back(images.back().data());
    }
    RETURN_IF_ERROR(shard.RestoreStateImages(*step, adam_t, master.data(), pointers));
    stats.step = *step;
    stats.adam_step = adam_t;
    stats.files_verified = 1;
    stats.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    return stats;
  }
  // Master, then each slot.
  std::vector<std::vector<float>> arrays(1 + shard.rule().slots().size());
  for (auto& a : arrays) a.assign(owned.size(), 0.0f);
  for (const Read& r : reads) {
    for (size_t a = 0; a < arrays.size(); ++a) {
      RETURN_IF_ERROR(ReadShardCheckpointRange(
          r.source->path, r.source->info, a, r.from,
          arrays[a].data() + (r.to - owned.begin)));
      stats.bytes_read += r.from.size() * sizeof(float);
    }
  }
  // Everything is read and verified: the state is replaced whole, with
  // pushes and arming held out (a claim or an arm between the write and the
  // tracker's reset would leave the weights overwritten and the step not).
  std::vector<const float*> slots;
  for (size_t a = 1; a < arrays.size(); ++a) slots.push_back(arrays[a].data());
  RETURN_IF_ERROR(shard.RestoreState(*step, adam_t, arrays[0].data(), slots));
  stats.step = *step;
  stats.adam_step = adam_t;
  stats.files_verified = static_cast<uint32_t>(sources.size());
  stats.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  return stats;
}

}  // namespace
}  // namespace zeroshard
