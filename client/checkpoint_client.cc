#include "client/checkpoint_client.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/status_from_proto.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"

namespace zeroshard {
absl::Status CheckpointOn(const ShardChannels& channels, int k, uint64_t step,
                          const std::string& directory,
                          bool wait,
                          absl::Duration timeout,
                          ShardFile* file) {
  v1::CheckpointRequest req;
  req.set_step(step);
  req.set_directory(directory);
  req.set_wait(wait);
  v1::CheckpointResponse response;
  // One copy of slot k writes its file (two would write the same path).
  RETURN_IF_ERROR(channels.OnOneCopy(k, [&](int server) {
    return RunWithRetry(channels.options().retry, [&] {
      grpc::ClientContext ctx;
      if (wait) {
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      } else {
        channels.PrepareControlContext(&ctx);
      }
      channels.RouteTo(&ctx, k, server);
      // A hung server is left (its slot's other copy writes the file)
      // rather than waited on for the checkpoint's timeout.
      const ScopedCall until_left(channels.leaving(server), &ctx);
      if (!until_left.registered()) {
        return absl::CancelledError(absl::StrCat(
            "Checkpoint of step ", step, " on ", channels.address(server),
            ": the server was left"));
      }
      return FromGrpcStatus(
          channels.stub(server).Checkpoint(&ctx, req, &response),
          "Checkpoint", channels.address(server));
    }, channels.channel(server).get());
  }));
  *file = ShardFileFromProto(response);
  return absl::OkStatus();
}

absl::Status ArmCheckpoint(const ShardChannels& channels, uint64_t step,
                           const std::string& directory) {
  return RunInParallel(channels.size(), [&](int k) {
    ShardFile ignored;
    return CheckpointOn(channels, k, step, directory, /*wait=*/false,
                        absl::ZeroDuration(), &ignored);
  });
}

absl::StatusOr<std::vector<ShardFile>> WaitCheckpoint(
    const ShardChannels& channels, uint64_t step, const std::string& directory,
    absl::Duration timeout) {
  std::vector<ShardFile> out(channels.size());
  RETURN_IF_ERROR(RunInParallel(channels.size(), [&](int k) {
    return CheckpointOn(channels, k, step, directory, /*wait=*/true, timeout,
                        &out[k]);
  }));
  return out;
}

absl::StatusOr<ServerRestore> RestoreCopy(const ShardChannels& channels,
                                          int slot, int k,
                                          const std::string& directory,
                                          uint64_t step,
                                          absl::Duration timeout) {
  v1::RestoreRequest req;
  req.set_directory(directory);
  req.set_step(step);
  v1::RestoreResponse reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  channels.RouteTo(&ctx, slot, k);
  RETURN_IF_ERROR(FromGrpcStatus(channels.stub(k).Restore(&ctx, req, &reply),
                                 "Restore", channels.address(k)));
  return RestoreFromProto(reply);
}

absl::StatusOr<std::vector<ServerRestore>> RestoreAll(
    const ShardChannels& channels, const std::string& directory,
    std::optional<uint64_t> step, absl::Duration timeout) {
  std::vector<v1::RestoreResponse> replies(channels.size());
  RETURN_IF_ERROR(RunInParallel(channels.size(), [&](int k) {
    v1::RestoreRequest req;
    req.set_directory(directory);
    if (step.has_value()) req.set_step(*step);
    // Every copy of slot k reads its file; they end at the same version.
    std::vector<v1::RestoreResponse> copies(channels.size());
    RETURN_IF_ERROR(channels.OnEveryCopy(k, [&](int server) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      channels.RouteTo(&ctx, k, server);
      return FromGrpcStatus(
          channels.stub(server).Restore(&ctx, req, &copies[server]),
          "Restore", channels.address(server));
    }));
    replies[k] = copies[channels.LiveHolders(k).front()];
    return absl::OkStatus();
  }));
  std::vector<ServerRestore> out;
  for (const v1::RestoreResponse& r : replies) {
    if (r.version() != replies[0].version()) {
      return absl::DataLossError(absl::StrCat(
          "Restore from ", directory, ": servers ended at different versions (",
          replies[0].version(), " and ", r.version(), ")"));
    }
    out.push_back(RestoreFromProto(r));
  }
  return out;
}

}  // namespace zeroshard
