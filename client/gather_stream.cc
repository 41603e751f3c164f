#include "client/gather_stream.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/generic_call.h"
#include "wire/gather_codec.h"
#include "wire/grpc_status.h"
#include "wire/proto_buffer.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

constexpr char kGatherMethod[] = "/zeroshard.v1.ShardService/Gather";

absl::Status OneAttempt(const ShardChannels& channels, int slot, int server,
                        const std::vector<GatherTarget>& targets, DType dtype,
                        int64_t min_version, CallCanceller* cancel,
                        const ServerRegion* region, GatherResult* result) {
  const ShardClientOptions& opt = channels.options();
  const std::string& address = channels.address(server);
  const std::string what = absl::StrCat("Gather(version ", min_version, ")");
  v1::GatherRequest request;
  uint64_t wanted = 0;
  for (const GatherTarget& t : targets) {
    v1::FlatRange* r = request.add_ranges();
    r->set_offset(t.range.begin);
    r->set_length(t.range.size());
    wanted += t.range.size();
  }
  request.set_dtype(ToProto(dtype));
  request.set_min_version(min_version);
  request.set_max_message_bytes(static_cast<uint32_t>(opt.max_message_bytes));
  if (region != nullptr) {
    request.set_region(region->id());
    request.set_region_offset(region->gather_offset());
  }
  // Where each target's elements start in the request's concatenation.
  std::vector<uint64_t> starts;
  starts.reserve(targets.size());
  for (uint64_t at = 0; const GatherTarget& t : targets) {
    starts.push_back(at);
    at += t.range.size();
  }

  grpc::ClientContext ctx;
  // A wait for a version may outlast another call's failover (the step it
  // waits for may meet a silent copy first).
  const absl::Duration wait =
      min_version >= 0 ? FailoverAllowance(opt) : absl::ZeroDuration();
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + opt.call_timeout + wait));
  channels.RouteTo(&ctx, slot, server);
  const ScopedCall by_caller(cancel, &ctx);
  if (!by_caller.registered()) {
    return absl::CancelledError(
        absl::StrCat(what, " from ", address, ": cancelled by the caller"));
  }
  // Ended too when the server is left meanwhile (ShardChannels::MarkDown):
  // the slot is then read from its other copy.
  const ScopedCall until_left(channels.leaving(server), &ctx);
  if (!until_left.registered()) {
    return absl::CancelledError(
        absl::StrCat(what, " from ", address, ": the server was left"));
  }
  GenericStreamCall call(channels.channel(server), kGatherMethod, &ctx);
  // A failure shows in Read and Finish.
  call.WriteLast(ProtoToByteBuffer(request));
  const size_t esize = DTypeSize(dtype);
  *result = GatherResult();
  uint64_t received = 0;
  std::vector<FlatRange> pieces;  // to find a piece sent twice
  bool first = true;
  absl::Status local;
  grpc::ByteBuffer buffer;
  GatherChunkView chunk;
  while (call.Read(&buffer)) {
    local = DecodeGatherChunk(buffer, &chunk);
    if (local.ok() && chunk.dtype != static_cast<int>(ToProto(dtype))) {
      local = absl::DataLossError(absl::StrCat("piece at ", chunk.offset,
                                               " has dtype ", chunk.dtype));
    }
    if (local.ok() && (region != nullptr) != (chunk.region_elems != 0)) {
      local = absl::DataLossError(absl::StrCat(
          "piece at ", chunk.offset, region != nullptr
                                         ? " came over gRPC, not in the region"
                                         : " names a region that was not asked for"));
    }
    if (local.ok() && region != nullptr && chunk.data_bytes != 0) {
      local = absl::DataLossError(absl::StrCat(
          "piece at ", chunk.offset, " carries data and region elements"));
    }
    if (local.ok() && chunk.data_bytes % esize != 0) {
      local = absl::DataLossError(absl::StrCat(
          "piece at ", chunk.offset, " has ", chunk.data_bytes,
          " bytes, not a whole number of elements"));
    }
    const uint64_t n =
        region != nullptr ? chunk.region_elems : chunk.data_bytes / esize;
    // The requested range holding the piece (targets are sorted).
    auto it = std::upper_bound(targets.begin(), targets.end(), chunk.offset,
                               [](uint64_t off, const GatherTarget& t) {
                                 return off < t.range.begin;
                               });
    // Inside one requested range, computed without overflow (a reply's
    // offset is not trusted).
    if (local.ok() &&
        (it == targets.begin() || chunk.offset >= (it - 1)->range.end ||
         n > (it - 1)->range.end - chunk.offset)) {
      local = absl::DataLossError(
          absl::StrCat("piece of ", n, " elements at ", chunk.offset,
                       " is outside the requested ranges"));
    }
    if (!local.ok()) {
      ctx.TryCancel();
      break;
    }
    const GatherTarget& t = *(it - 1);
    uint8_t* dst = t.dst + (chunk.offset - t.range.begin) * esize;
    if (region != nullptr) {
      // The server wrote the piece at its place in the concatenation.
      const uint64_t at = starts[(it - 1) - targets.begin()] +
                          (chunk.offset - t.range.begin);
      std::memcpy(dst, region->at(region->gather_offset() + at * esize),
                  n * esize);
    } else {
      chunk.CopyDataTo(dst);
    }
    pieces.push_back({chunk.offset, chunk.offset + n});
    received += n;
    result->bytes += n * esize;
    if (first || chunk.version < result->min_version) {
      result->min_version = chunk.version;
    }
    if (first || chunk.version > result->max_version) {
      result->max_version = chunk.version;
    }
    first = false;
  }
  grpc::Status st = call.Finish();
  if (!local.ok()) {
    return absl::Status(local.code(), absl::StrCat(what, " from ", address,
                                                   ": ", local.message()));
  }
  if (!st.ok()) return FromGrpcStatus(st, what, address);
  // Disjoint pieces inside the requested ranges that add up to what was asked
  // cover it exactly; a piece sent twice could hide a hole.
  absl::Status disjoint = CheckDisjoint(pieces);
  if (!disjoint.ok()) {
    return absl::DataLossError(
        absl::StrCat(what, " from ", address, ": ", disjoint.message()));
  }
  if (received != wanted) {
    return absl::DataLossError(absl::StrCat(what, " from ", address,
                                            ": received ", received, " of ",
                                            wanted, " elements"));
  }
  return absl::OkStatus();
}

}  // namespace

void MergeGatherResult(const GatherResult& b, bool first, GatherResult* a) {
  if (first) {
    *a = b;
    return;
  }
  a->min_version = std::min(a->min_version, b.min_version);
  a->max_version = std::max(a->max_version, b.max_version);
  a->bytes += b.bytes;
}

absl::StatusOr<GatherResult> GatherFromServer(const ShardChannels& channels,
                                              int server,
                                              std::vector<GatherTarget> targets,
                                              DType dtype,
                                              int64_t min_version,
                                              CallCanceller* cancel) {
  std::sort(targets.begin(), targets.end(),
            [](const GatherTarget& a, const GatherTarget& b) {
              return a.range.begin < b.range.begin;
            });
  GatherResult result;
  uint64_t bytes = 0;
  for (const GatherTarget& t : targets) bytes += t.range.size() * DTypeSize(dtype);
  // Slot `server` from its first live copy (ShardChannels::OnOneCopy).
  const int slot = server;
  absl::Status s = channels.OnOneCopy(slot, [&](int k) {
    // Through the region when the elements fit its gather area and no
    // other Gather is using it; over gRPC otherwise. A copy of another
    // slot is read over gRPC.
    const std::shared_ptr<const ServerRegion> region =
        k == slot ? ServerRegion::TakeGather(channels.region(k), bytes)
                  : nullptr;
    return RunWithRetry(channels.options().retry, [&] {
      return OneAttempt(channels, slot, k, targets, dtype, min_version,
                        cancel, region.get(), &result);
    }, channels.channel(k).get());
  });
  if (!s.ok()) return s;
  return result;
}

}  // namespace zeroshard
