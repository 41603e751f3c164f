// zeroshard-ctl checkpoint, restore and list: coordinated checkpoints of
// running (or idle) servers, restoring them, and listing a checkpoint
// directory offline (client/shard_cluster.h, common/checkpoint_manifest.h).
#include <cstdio>
#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/shard_cluster.h"
#include "tools/ctl/commands.h"
#include "common/checkpoint_files.h"
#include "common/checkpoint_manifest.h"

namespace zeroshard::ctl {
namespace {

// Server 0's loss-scaler record, or the default state (with a note).
LossScalerState LossScalerFromKv(const ShardCluster& cluster, uint64_t step) {
  // The record lives in the KV scope of the run's current attempt.
  absl::StatusOr<ServerStatus> inspected = cluster.Inspect(0);
  KvClient::Scope scope;
  if (inspected.ok()) scope = {inspected->run_id, inspected->attempt};
  absl::StatusOr<std::unique_ptr<KvClient>> kv = cluster.OpenKv(scope);
  absl::StatusOr<std::string> value =
      kv.ok() ? (*kv)->TryGet(LossScalerKvKey(step))
              : absl::StatusOr<std::string>(kv.status());
  if (value.ok()) {
    auto record = ParseLossScalerRecord(*value);
    if (record.ok() && record->first == step) {
      std::printf("loss scaler: scale %g from server 0's record of step %llu\n",
                  record->second.scale, static_cast<unsigned long long>(step));
      return record->second;
    }
  }
  std::printf("loss scaler: no record of step %llu on server 0 (not FP16, or "
              "not written by zeroshard-worker); the default state\n",
              static_cast<unsigned long long>(step));
  return LossScalerState();
}

}  // namespace

int RunCheckpoint(const CtlFlags& flags) {
  if (flags.dir.empty()) {
    std::fprintf(stderr, "checkpoint needs --dir=DIR\n");
    return 2;
  }
  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) {
    std::fprintf(stderr, "checkpoint: %s\n",
                 channels.status().ToString().c_str());
    return 2;
  }
  auto view = (*channels)->Discover();
  if (!view.ok()) {
    std::fprintf(stderr, "checkpoint: %s\n", view.status().ToString().c_str());
    return 1;
  }
  SnapshotReadOptions options;
  options.timeout = flags.timeout;
  std::vector<int> all;
  for (int k = 0; k < (*channels)->num_servers(); ++k) all.push_back(k);
  auto armed = (*channels)->SnapshotAtOneStep(all, flags.dir, flags.step,
                                              options);
  if (!armed.ok()) {
    std::fprintf(stderr, "checkpoint: %s\n", armed.status().ToString().c_str());
    return 1;
  }
  CheckpointInfo info;
  info.step = armed->step;
  info.layout = &view->layout;
  // Rank 0 records the scaler's state for a step before the step before it
  // is applied, so the record of the armed step exists once it is reached.
  info.loss_scaler = LossScalerFromKv(**channels, armed->step);
  if (absl::Status s = CommitCheckpoint(flags.dir, armed->files, info,
                                        /*keep_last=*/0);
      !s.ok()) {
    std::fprintf(stderr, "checkpoint: %s\n", s.ToString().c_str());
    return 1;
  }
  const std::string folder =
      (std::filesystem::path(flags.dir) / CheckpointFolderName(armed->step))
          .string();
  uint64_t bytes = 0;
  std::vector<std::vector<std::string>> rows = {
      {"#", "file", "bytes", "copy s", "write s"}};
  for (size_t k = 0; k < armed->files.size(); ++k) {
    const ShardFile& r = armed->files[k];
    bytes += r.bytes;
    rows.push_back({absl::StrCat(k),
                    std::filesystem::path(r.path).filename().string(),
                    absl::StrCat(r.bytes),
                    absl::StrFormat("%.3f", r.copy_seconds),
                    absl::StrFormat("%.3f", r.write_seconds)});
  }
  std::printf("checkpoint of step %llu: %s (%s)\n",
              static_cast<unsigned long long>(armed->step), folder.c_str(),
              HumanBytes(static_cast<double>(bytes)).c_str());
  PrintTable(rows);
  return 0;
}

int RunRestore(const CtlFlags& flags) {
  if (flags.dir.empty()) {
    std::fprintf(stderr, "restore needs --dir=DIR\n");
    return 2;
  }
  auto channels = ShardCluster::Connect(flags.servers, ClientOptions(flags));
  if (!channels.ok()) {
    std::fprintf(stderr, "restore: %s\n", channels.status().ToString().c_str());
    return 2;
  }
  if (int rc = RefuseLiveRun(**channels, flags, "restore"); rc != 0) return rc;
  auto restored = (*channels)->Restore(flags.dir, flags.step, flags.timeout);
  if (!restored.ok()) {
    std::fprintf(stderr, "restore: %s\n", restored.status().ToString().c_str());
    return 1;
  }
  std::vector<std::vector<std::string>> rows = {
      {"#", "address", "version", "adam t", "files", "bytes read", "seconds"}};
  for (size_t k = 0; k < restored->size(); ++k) {
    const ServerRestore& r = (*restored)[k];
    rows.push_back({absl::StrCat(k), (*channels)->address(k),
                    absl::StrCat(r.version), absl::StrCat(r.optimizer_step),
                    absl::StrCat(r.files_verified),
                    absl::StrCat(r.bytes_read),
                    absl::StrFormat("%.3f", r.seconds)});
  }
  std::printf("restored %zu servers from %s at step %llu\n", restored->size(),
              flags.dir.c_str(),
              static_cast<unsigned long long>((*restored)[0].version));
  PrintTable(rows);
  return 0;
}

int RunList(const CtlFlags& flags) {
  if (flags.dir.empty()) {
    std::fprintf(stderr, "list needs --dir=DIR\n");
    return 2;
  }
  auto steps = ListCheckpoints(flags.dir);
  if (!steps.ok()) {
    std::fprintf(stderr, "list: %s\n", steps.status().ToString().c_str());
    return 1;
  }
  // Every file of each checkpoint hashed against its manifest: "complete"
  // (a manifest) is not "intact" (files that load).
  std::vector<std::vector<std::string>> rows = {
      {"step", "servers", "bytes", "model", "config", "files", "folder"}};
  std::vector<std::string> complete, damaged;
  std::optional<uint64_t> newest_intact;
  for (uint64_t step : *steps) {
    auto m = ReadCheckpointManifest(flags.dir, step);
    if (!m.ok()) continue;  // listed but gone meanwhile
    uint64_t bytes = 0;
    for (const CheckpointShardEntry& e : m->shards) bytes += e.bytes;
    complete.push_back(CheckpointFolderName(step));
    const absl::Status files = VerifyCheckpointFiles(flags.dir, *m, /*full=*/true);
    if (files.ok()) {
      newest_intact = step;
    } else {
      damaged.push_back(absl::StrCat("step ", step, ": ", files.message()));
    }
    rows.push_back({absl::StrCat(step), absl::StrCat(m->num_servers),
                    absl::StrCat(bytes),
                    absl::StrFormat("%016x", m->model_fingerprint),
                    absl::StrFormat("%016x", m->config_fingerprint),
                    files.ok() ? "intact" : "DAMAGED", complete.back()});
  }
  std::printf("%zu complete checkpoint%s in %s\n", complete.size(),
              complete.size() == 1 ? "" : "s", flags.dir.c_str());
  if (!complete.empty()) PrintTable(rows);
  for (const std::string& d : damaged) std::printf("damaged: %s\n", d.c_str());
  if (!damaged.empty()) {
    if (newest_intact.has_value()) {
      std::printf("newest intact: step %llu\n",
                  static_cast<unsigned long long>(*newest_intact));
    } else {
      std::printf("no intact checkpoint\n");
    }
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(flags.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step-", 0) != 0) continue;
    if (std::find(complete.begin(), complete.end(), name) == complete.end()) {
      std::printf("incomplete: %s (no valid %s)\n", name.c_str(),
                  kCheckpointManifestName);
    }
  }
  return damaged.empty() ? 0 : 1;
}

}  // namespace zeroshard::ctl
