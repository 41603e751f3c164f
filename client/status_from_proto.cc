#include "client/status_from_proto.h"

#include <algorithm>

#include <string>

#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "wire/proto_convert.h"

namespace zeroshard {
namespace {

std::map<std::string, uint64_t> ToMap(
    const google::protobuf::Map<std::string, uint64_t>& m) {
  return std::map<std::string, uint64_t>(m.begin(), m.end());
}

FlatRange Range(uint64_t begin, uint64_t end) { return FlatRange{begin, end}; }

}  // namespace

absl::StatusOr<ServerStatus> StatusFromProto(const v1::InspectResponse& r) {
  ServerStatus s;
  s.initialized = r.initialized();
  s.server_index = r.server_index();
  s.num_servers = r.num_servers();
  s.owned = Range(r.owned_begin(), r.owned_end());
  s.total_elems = r.total_elems();
  s.chunk_elems = r.chunk_elems();
  s.num_chunks = r.num_chunks();
  s.min_version = r.min_version();
  s.max_version = r.max_version();
  s.optimizer_step = r.adam_step();
  // Before Init every field holds its wire default (lr 0, ...), and so does
  // the status.
  ASSIGN_OR_RETURN(s.optimizer, FromProto(r.optimizer()));
  s.param_groups = ParamGroupsFromProto(r.optimizer());
  s.manifest = FromProto(r.manifest());
  s.placement = r.placement();
  s.bytes_by_kind = ToMap(r.bytes_by_kind());
  s.master_norm = r.norms().master();
  s.state_slots.assign(r.state_slots().begin(), r.state_slots().end());
  if (s.state_slots.empty()) {
    // A server from before slots were named reports AdamW's two fields.
    s.state_norms = {{"exp_avg", r.norms().exp_avg()},
                     {"exp_avg_sq", r.norms().exp_avg_sq()}};
  }
  for (const std::string& slot : s.state_slots) {
    auto it = r.norms().state().find(slot);
    s.state_norms.emplace_back(
        slot, it == r.norms().state().end() ? 0.0 : it->second);
  }
  const v1::RpcCounters& c = r.counters();
  s.counters.calls = ToMap(c.calls());
  s.counters.bytes_in = c.bytes_in();
  s.counters.bytes_out = c.bytes_out();
  s.counters.errors = ToMap(c.errors());
  s.counters.unauthenticated = ToMap(c.unauthenticated());
  s.counters.permission_denied = ToMap(c.permission_denied());
  s.pending_grad_bytes = r.pending_grad_bytes();
  s.pending_grad_limit_bytes = r.pending_grad_limit_bytes();
  s.partial_chunks = r.partial_chunks();
  s.attempt = r.attempt();
  s.prepared_elems = r.prepared_elems();
  s.prepared_step = r.prepared_step();
  s.prepared_attempt = r.prepared_attempt();
  s.run_id = r.run_id();
  s.num_workers = r.num_workers();
  s.slot = r.slot();
  s.replicas = std::max<uint32_t>(1, r.replicas());
  s.seconds_since_push = r.seconds_since_push();
  return s;
}

ServerInit InitFromProto(const v1::InitResponse& r) {
  return ServerInit{Range(r.owned_begin(), r.owned_end()), r.total_elems(),
                    r.already_initialized()};
}

ShardFile ShardFileFromProto(const v1::CheckpointResponse& r) {
  ShardFile f;
  f.path = r.path();
  f.bytes = r.bytes();
  f.checksum = r.checksum();
  f.done = r.done();
  f.step = r.step();
  f.owned = Range(r.owned().offset(), r.owned().offset() + r.owned().length());
  f.copy_seconds = r.copy_seconds();
  f.write_seconds = r.write_seconds();
  if (r.has_optimizer()) {
    // Cannot fail for a parsed message; an empty string says nothing.
    (void)google::protobuf::util::MessageToJsonString(r.optimizer(),
                                                      &f.optimizer_json);
  }
  return f;
}

ServerRestore RestoreFromProto(const v1::RestoreResponse& r) {
  return ServerRestore{r.version(), r.adam_step(), r.files_verified(),
                       r.bytes_read(), r.seconds()};
}

}  // namespace zeroshard
