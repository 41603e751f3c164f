// What the shard servers report, in the project's own types: one server's
// Inspect (ServerStatus), the whole cluster's (ClusterView), and what Init,
// a checkpoint and a restore return per server. Part of the client
// library's public API (client/shard_cluster.h); the wire messages they are
// read from (proto/zeroshard/v1/shard.proto) stay inside client/.
#ifndef ZEROSHARD_CLIENT_SERVER_STATUS_H_
#define ZEROSHARD_CLIENT_SERVER_STATUS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/layout.h"
#include "common/optimizer_config.h"
#include "common/param_groups.h"

namespace zeroshard {

// A snapshot's arrays are named: "master", or one of the servers'
// optimizer state slots (ServerStatus::state_slots; AdamW: exp_avg,
// exp_avg_sq).
inline constexpr char kMasterState[] = "master";

// Calls and bytes a server counted since it started.
struct RpcCounts {
  std::map<std::string, uint64_t> calls;  // by RPC method
  uint64_t bytes_in = 0;                  // payload received
  uint64_t bytes_out = 0;                 // payload sent
  std::map<std::string, uint64_t> errors;  // by status code name
  // Refused for credentials / for the role, by method (also in errors).
  std::map<std::string, uint64_t> unauthenticated;
  std::map<std::string, uint64_t> permission_denied;
};

// One server's answer to Inspect.
struct ServerStatus {
  // Before Init the fields below but the counters hold zeros.
  bool initialized = false;
  uint32_t server_index = 0;
  uint32_t num_servers = 0;
  FlatRange owned;
  uint64_t total_elems = 0;
  uint64_t chunk_elems = 0;
  uint64_t num_chunks = 0;
  uint64_t min_version = 0;  // lowest and highest chunk version
  uint64_t max_version = 0;
  // Non-skipped steps the optimizer applied (lowest over chunks).
  uint64_t optimizer_step = 0;
  OptimizerConfig optimizer;
  // The parameter groups Init sent; empty: one group.
  std::vector<ResolvedGroup> param_groups;
  std::string placement;  // "host", "pinned" or "device"
  std::map<std::string, uint64_t> bytes_by_kind;
  // L2 norms over the owned range: the master weights, and each state slot
  // in the rule's order.
  double master_norm = 0;
  std::vector<std::pair<std::string, double>> state_norms;
  RpcCounts counters;
  uint64_t pending_grad_bytes = 0;  // buffered awaiting a commit
  uint64_t pending_grad_limit_bytes = 0;
  ModelManifest manifest;
  uint64_t partial_chunks = 0;  // chunks with a step cut short
  uint64_t attempt = 0;         // highest push attempt seen
  // Gradient elements held by prepared pushes awaiting ApplyStep.
  uint64_t prepared_elems = 0;
  uint64_t prepared_step = 0;
  uint64_t prepared_attempt = 0;
  std::string run_id;
  uint32_t num_workers = 0;
  // The slot this status describes (the server's own, or with replicas the
  // copy asked for: ShardCluster::InspectCopy) and the copies of each slot
  // the run keeps (1 or 2).
  uint32_t slot = 0;
  uint32_t replicas = 1;
  // The optimizer rule's state slots, in its order.
  std::vector<std::string> state_slots;
  // Seconds since the server last admitted a gradient push; -1: none since
  // it started.
  double seconds_since_push = -1;
};

// What every server reports, and the layout it implies.
struct ClusterView {
  FlatLayout layout;
  std::vector<ServerStatus> servers;  // in index order
  uint64_t max_version = 0;           // over servers
  uint64_t min_optimizer_step = 0;
  // The optimizer rule's state slots, as every server names them.
  std::vector<std::string> state_slots;

  // "master" and the state slots: what a snapshot can read.
  std::vector<std::string> StateNames() const;
  // INVALID_ARGUMENT naming the choices unless `name` is one of StateNames().
  absl::Status CheckStateName(const std::string& name) const;
};

// One server's answer to Init.
struct ServerInit {
  FlatRange owned;
  uint64_t total_elems = 0;
  // Init is idempotent: the server already had an identical one.
  bool already_initialized = false;
};

// One server's file of a checkpoint (or its in-memory snapshot: no path).
struct ShardFile {
  std::string path;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  bool done = false;
  uint64_t step = 0;
  FlatRange owned;
  double copy_seconds = 0;
  double write_seconds = 0;
  // The optimizer the file was written under: the wire's OptimizerConfig
  // in protobuf's JSON form ("" from a server that does not say).
  std::string optimizer_json;
};

// One server's answer to a restore.
struct ServerRestore {
  uint64_t version = 0;
  uint64_t optimizer_step = 0;
  uint32_t files_verified = 0;
  uint64_t bytes_read = 0;
  double seconds = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SERVER_STATUS_H_
