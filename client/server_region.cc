#include "client/server_region.h"

#include <algorithm>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/shard_channels.h"
#include "wire/grpc_status.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<ServerRegion>> ServerRegion::Open(
    const ShardChannels& channels, int k, uint64_t push_bytes,
    uint64_t gather_bytes) {
  auto round_up = [](uint64_t n) { return (n + 63) / 64 * 64; };
  push_bytes = round_up(push_bytes);
  gather_bytes = round_up(gather_bytes);
  if (push_bytes == 0 && gather_bytes == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", channels.address(k), ": nothing to move, no region"));
  }
  v1::OpenRegionRequest request;
  request.set_bytes(SharedMemory::kDataOffset + push_bytes + gather_bytes);
  request.set_run_id(channels.options().run_id);
  v1::OpenRegionResponse response;
  {
    grpc::ClientContext ctx;
    channels.PrepareControlContext(&ctx);
    grpc::Status st = channels.stub(k).OpenRegion(&ctx, request, &response);
    if (!st.ok()) return FromGrpcStatus(st, "OpenRegion", channels.address(k));
  }
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory =
      SharedMemory::Attach(response.pid(), response.fd(), response.bytes(),
                           response.nonce());
  if (!memory.ok() || response.bytes() != request.bytes() ||
      response.data_offset() != SharedMemory::kDataOffset) {
    CloseOn(channels, k, response.region());
    return absl::FailedPreconditionError(absl::StrCat(
        "server ", channels.address(k), ": its region cannot be used here: ",
        memory.ok() ? "its size or layout differs from the request"
                    : memory.status().message()));
  }
  return std::unique_ptr<ServerRegion>(new ServerRegion(
      response.region(), *std::move(memory), push_bytes, gather_bytes));
}

std::shared_ptr<const ServerRegion> ServerRegion::Take(
    std::shared_ptr<const ServerRegion> region, bool push) {
  if (region == nullptr || !region->area_mu(push).TryLock()) return nullptr;
  const ServerRegion* held = region.get();
  return std::shared_ptr<const ServerRegion>(
      held, [region = std::move(region), push](const ServerRegion* r) {
        r->area_mu(push).Unlock();
      });
}

std::shared_ptr<const ServerRegion> ServerRegion::TakePush(
    std::shared_ptr<const ServerRegion> region) {
  return Take(std::move(region), /*push=*/true);
}

std::shared_ptr<const ServerRegion> ServerRegion::TakeGather(
    std::shared_ptr<const ServerRegion> region, uint64_t bytes) {
  if (region == nullptr || bytes > region->gather_bytes()) return nullptr;
  return Take(std::move(region), /*push=*/false);
}

void ServerRegion::CloseOn(const ShardChannels& channels, int k,
                           uint64_t id) {
  v1::CloseRegionRequest request;
  request.set_region(id);
  v1::CloseRegionResponse response;
  grpc::ClientContext ctx;
  // Short: a client closing down does not wait on a server that is gone
  // (which frees its regions as it exits).
  ctx.set_deadline(absl::ToChronoTime(
      absl::Now() +
      std::min(channels.options().control_timeout, absl::Seconds(2))));
  channels.stub(k).CloseRegion(&ctx, request, &response);
}

}  // namespace zeroshard
