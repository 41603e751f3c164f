#include "client/checkpoint_client.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {
absl::Status CheckpointOn(const ShardChannels& channels, int k, uint64_t step,
                          const std::string& directory,
                          bool wait,
                          absl::Duration timeout,
                          v1::CheckpointResponse* response) {
  v1::CheckpointRequest req;
  req.set_step(step);
  req.set_directory(directory);
  req.set_wait(wait);
  return RunWithRetry(channels.options().retry, [&] {
    grpc::ClientContext ctx;
    if (wait) {
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    } else {
      channels.PrepareControlContext(&ctx);
    }
    return FromGrpcStatus(channels.stub(k).Checkpoint(&ctx, req, response),
                          "Checkpoint", channels.address(k));
  });
}

absl::Status ArmCheckpoint(const ShardChannels& channels, uint64_t step,
                           const std::string& directory) {
  return RunInParallel(channels.size(), [&](int k) {
    v1::CheckpointResponse resp;
    return CheckpointOn(channels, k, step, directory, /*wait=*/false,
                        absl::ZeroDuration(), &resp);
  });
}

absl::StatusOr<std::vector<v1::CheckpointResponse>> WaitCheckpoint(
    const ShardChannels& channels, uint64_t step, const std::string& directory,
    absl::Duration timeout) {
  std::vector<v1::CheckpointResponse> out(channels.size());
  RETURN_IF_ERROR(RunInParallel(channels.size(), [&](int k) {
    return CheckpointOn(channels, k, step, directory, /*wait=*/true, timeout,
                        &out[k]);
  }));
  return out;
}

absl::Status CommitCheckpoint(const std::string& directory,
                              const std::vector<v1::CheckpointResponse>& files,
                              const CheckpointInfo& info, int keep_last) {
  const FlatLayout& layout = *info.layout;
  if (files.size() != layout.num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint of step ", info.step, ": ", files.size(),
        " shard files for ", layout.num_servers(), " servers"));
  }
  CheckpointManifest m;
  m.step = info.step;
  m.num_servers = layout.num_servers();
  m.total_elems = layout.total_elems();
  m.model_fingerprint = ModelFingerprint(layout.manifest());
  m.config_fingerprint = info.config_fingerprint;
  m.model = layout.manifest();
  m.loss_scaler = info.loss_scaler;
  m.data_position = info.data_position;
  m.schedule_total_steps = info.schedule_total_steps;
  for (uint32_t k = 0; k < files.size(); ++k) {
    const v1::CheckpointResponse& f = files[k];
    const FlatRange want = layout.ServerRange(k);
    const FlatRange got{f.owned().offset(), f.owned().offset() + f.owned().length()};
    if (!f.done() || f.step() != info.step || !(got == want)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", info.step, ": server ", k,
          " reported step ", f.step(), " range [", got.begin, ", ", got.end,
          ") done=", f.done(), "; expected range [", want.begin, ", ",
          want.end, ")"));
    }
    CheckpointShardEntry e;
    e.server_index = k;
    e.owned = got;
    e.file = std::filesystem::path(f.path()).filename().string();
    e.checksum = f.checksum();
    e.bytes = f.bytes();
    m.shards.push_back(std::move(e));
  }
  RETURN_IF_ERROR(WriteCheckpointManifest(directory, m));
  if (keep_last > 0) RETURN_IF_ERROR(PruneCheckpoints(directory, keep_last));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::RestoreResponse>> RestoreAll(
    const ShardChannels& channels, const std::string& directory,
    std::optional<uint64_t> step, absl::Duration timeout) {
  std::vector<v1::RestoreResponse> out(channels.size());
  RETURN_IF_ERROR(RunInParallel(channels.size(), [&](int k) {
    v1::RestoreRequest req;
    req.set_directory(directory);
    if (step.has_value()) req.set_step(*step);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return FromGrpcStatus(channels.stub(k).Restore(&ctx, req, &out[k]),
                          "Restore", channels.address(k));
  }));
  for (const v1::RestoreResponse& r : out) {
    if (r.version() != out[0].version()) {
      return absl::DataLossError(absl::StrCat(
          "Restore from ", directory, ": servers ended at different versions (",
          out[0].version(), " and ", r.version(), ")"));
    }
  }
  return out;
}

}  // namespace zeroshard
