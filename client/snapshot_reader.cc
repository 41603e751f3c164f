#include "client/snapshot_reader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/checkpoint_client.h"
#include "client/status_from_proto.h"
#include "common/status_macros.h"
#include "wire/grpc_status.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

absl::StatusOr<uint64_t> MaxVersion(const ShardChannels& channels,
                                    const std::vector<int>& servers) {
  uint64_t v = 0;
  for (int k : servers) {
    ASSIGN_OR_RETURN(v1::InspectResponse r, channels.InspectSlot(k));
    v = std::max<uint64_t>(v, r.max_version());
  }
  return v;
}

}  // namespace

absl::StatusOr<ClusterView> InspectCluster(const ShardChannels& channels) {
  // Each slot from its first live copy (with one copy: its server).
  std::vector<absl::StatusOr<v1::InspectResponse>> all(
      channels.size(), absl::UnknownError("not run"));
  RunInParallel(channels.size(), [&](int k) {
    all[k] = channels.InspectSlot(k);
    return absl::OkStatus();
  }).IgnoreError();
  std::vector<v1::InspectResponse> servers;
  std::vector<ServerStatus> statuses;
  uint64_t max_version = 0;
  uint64_t min_adam_step = UINT64_MAX;
  for (int k = 0; k < channels.size(); ++k) {
    if (!all[k].ok()) return all[k].status();
    const v1::InspectResponse& r = *all[k];
    if (!r.initialized()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", k, " at ", channels.address(k), " is not initialized"));
    }
    // The slot's own server, or (replicas) the copy on another that names
    // slot k.
    const bool slot_k = r.server_index() == static_cast<uint32_t>(k) ||
                        (r.replicas() > 1 && r.slot() == static_cast<uint32_t>(k));
    if (r.num_servers() != static_cast<uint32_t>(channels.size()) || !slot_k) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server at ", channels.address(k), " is server ", r.server_index(),
          " of ", r.num_servers(), ", listed as ", k, " of ",
          channels.size()));
    }
    if (k > 0 && r.manifest().SerializeAsString() !=
                     all[0]->manifest().SerializeAsString()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", k, " at ", channels.address(k),
          " holds another model than server 0"));
    }
    max_version = std::max<uint64_t>(max_version, r.max_version());
    min_adam_step = std::min<uint64_t>(min_adam_step, r.adam_step());
    servers.push_back(r);
    ASSIGN_OR_RETURN(ServerStatus status, StatusFromProto(r));
    statuses.push_back(std::move(status));
  }
  if (servers.empty()) return absl::InvalidArgumentError("no servers");
  const ModelManifest m = FromProto(servers[0].manifest());
  ASSIGN_OR_RETURN(FlatLayout layout,
                   FlatLayout::Create(m, channels.size(), m.partition_count));
  for (int k = 0; k < channels.size(); ++k) {
    const FlatRange want = layout.ServerRange(k);
    const v1::InspectResponse& r = servers[k];
    if (r.owned_begin() != want.begin || r.owned_end() != want.end) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", k, " owns [", r.owned_begin(), ", ", r.owned_end(),
          "), the layout says [", want.begin, ", ", want.end, ")"));
    }
  }
  // A server from before slots were named reports none: AdamW's.
  std::vector<std::string> slots(servers[0].state_slots().begin(),
                                 servers[0].state_slots().end());
  if (slots.empty()) slots = {"exp_avg", "exp_avg_sq"};
  for (int k = 1; k < channels.size(); ++k) {
    std::vector<std::string> other(servers[k].state_slots().begin(),
                                   servers[k].state_slots().end());
    if (other.empty()) other = {"exp_avg", "exp_avg_sq"};
    if (other != slots) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", k, " keeps the optimizer state [",
          absl::StrJoin(other, ", "), "], server 0 [",
          absl::StrJoin(slots, ", "), "]"));
    }
  }
  return ClusterView{std::move(layout), std::move(statuses), max_version,
                     min_adam_step, std::move(slots)};
}

absl::StatusOr<ArmedSnapshot> SnapshotAtOneStep(
    const ShardChannels& channels, const std::vector<int>& servers,
    const std::string& directory, std::optional<uint64_t> step,
    const SnapshotReadOptions& options) {
  ArmedSnapshot out;
  uint64_t v = 0;
  if (step.has_value()) {
    v = *step;
  } else {
    ASSIGN_OR_RETURN(v, MaxVersion(channels, servers));
  }
  const int tries = step.has_value() ? 1 : std::max(options.max_tries, 1);
  absl::Status armed;
  for (int t = 0; t < tries; ++t) {
    std::vector<ShardFile> ignored(servers.size());
    armed = RunInParallel(static_cast<int>(servers.size()), [&](int i) {
      return CheckpointOn(channels, servers[i], v, directory, /*wait=*/false,
                          options.timeout, &ignored[i]);
    });
    if (armed.ok() || !absl::IsFailedPrecondition(armed)) break;
    // Training moved past v on some server: the next step that none has
    // reached yet.
    ASSIGN_OR_RETURN(uint64_t now, MaxVersion(channels, servers));
    v = std::max(v, now) + 1;
  }
  if (!armed.ok()) {
    return absl::Status(armed.code(),
                        absl::StrCat("arming a snapshot (", tries,
                                     " tries, last at step ", v,
                                     "): ", armed.message()));
  }
  out.step = v;
  out.files.resize(servers.size());
  RETURN_IF_ERROR(RunInParallel(static_cast<int>(servers.size()), [&](int i) {
    return CheckpointOn(channels, servers[i], v, directory, /*wait=*/true,
                        options.timeout, &out.files[i]);
  }));
  return out;
}

absl::Status ReadSnapshotRange(const ShardChannels& channels, int k,
                               uint64_t step, FlatRange range,
                               const std::string& array,
                               const SnapshotReadOptions& options,
                               float* dst) {
  v1::ReadSnapshotRequest req;
  req.set_step(step);
  req.set_state(array);
  v1::FlatRange* r = req.add_ranges();
  r->set_offset(range.begin);
  r->set_length(range.size());
  // Slot k's snapshot lies with the copy CheckpointOn armed: its first
  // live one.
  const std::vector<int> holders = channels.LiveHolders(k);
  const int slot = k;
  k = holders.empty() ? slot : holders.front();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
  channels.RouteTo(&ctx, slot, k);
  auto reader = channels.stub(k).ReadSnapshot(&ctx, req);
  v1::GatherChunk chunk;
  uint64_t pos = range.begin;
  absl::Status bad;
  while (reader->Read(&chunk)) {
    if (!bad.ok()) continue;  // drain
    const uint64_t n = chunk.data().size() / sizeof(float);
    if (chunk.dtype() != v1::DTYPE_FP32 || chunk.version() != step ||
        chunk.data().size() % sizeof(float) != 0 || chunk.offset() != pos ||
        n > range.end - pos) {
      bad = absl::DataLossError(absl::StrCat(
          "ReadSnapshot from ", channels.address(k), ": piece at offset ",
          chunk.offset(), " (", chunk.data().size(), " bytes, version ",
          chunk.version(), ") does not continue [", pos, ", ", range.end,
          ") of step ", step));
      ctx.TryCancel();
      continue;
    }
    std::memcpy(dst + (pos - range.begin), chunk.data().data(),
                chunk.data().size());
    pos += n;
  }
  const absl::Status s =
      FromGrpcStatus(reader->Finish(), "ReadSnapshot", channels.address(k));
  RETURN_IF_ERROR(bad);
  RETURN_IF_ERROR(s);
  if (pos != range.end) {
    return absl::DataLossError(absl::StrCat(
        "ReadSnapshot from ", channels.address(k), " ended at ", pos,
        " of [", range.begin, ", ", range.end, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ConsistentSnapshot> ReadConsistentSnapshot(
    const ShardChannels& channels, const FlatLayout& layout, FlatRange range,
    const std::vector<std::string>& arrays,
    const SnapshotReadOptions& options) {
  if (range.begin > range.end || range.end > layout.total_elems()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "range [", range.begin, ", ", range.end, ") is outside [0, ",
        layout.total_elems(), ")"));
  }
  const std::vector<ServerSlice> slices = layout.SplitByServer(range);
  std::vector<int> servers;
  for (const ServerSlice& s : slices) servers.push_back(s.server);
  ConsistentSnapshot out;
  out.range = range;
  if (servers.empty()) return out;
  ASSIGN_OR_RETURN(ArmedSnapshot armed,
                   SnapshotAtOneStep(channels, servers, "", std::nullopt,
                                     options));
  out.step = armed.step;
  out.arrays.assign(arrays.size(), std::vector<float>(range.size()));
  RETURN_IF_ERROR(RunInParallel(static_cast<int>(slices.size()), [&](int i) {
    for (size_t a = 0; a < arrays.size(); ++a) {
      RETURN_IF_ERROR(ReadSnapshotRange(
          channels, slices[i].server, out.step, slices[i].range, arrays[a],
          options, out.arrays[a].data() + (slices[i].range.begin - range.begin)));
    }
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace zeroshard
