// A shard server's Prometheus metrics (docs/DESIGN.md, "Observability"),
// kept in a MetricsRegistry that zeroshard-server serves over HTTP
// (common/metrics_http.h):
//
//   zeroshard_rpc_duration_seconds{method,code}  histogram, every RPC
//       (health checks included), from its start to its status
//   zeroshard_rpc_received_bytes_total, zeroshard_rpc_sent_bytes_total
//       payload bytes (RpcCounters' totals, as Inspect reports them)
//   zeroshard_adamw_updated_elements_total  elements AdamW updated
//   zeroshard_chunk_version{bound="min"|"max"}  the owned chunks' versions
//   zeroshard_state_bytes{placement,kind}  master, each optimizer state slot,
//       mirror and pending_grads bytes, by the --placement they live in
//   zeroshard_checkpoint_write_seconds, zeroshard_checkpoint_copy_seconds
//       histograms, one observation per shard snapshot written
//   zeroshard_initialized  1 once Init has run
//
//   ServerMetrics metrics(&registry, Placement::kHost);
//   builder.experimental().SetInterceptorCreators(metrics.Interceptors());
//   int id = registry.AddCollector([&] { metrics.Collect(service); });
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_SERVER_METRICS_H_
#define ZEROSHARD_SERVER_SERVER_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "server/placement.h"
#include "server/shard_snapshot.h"

namespace zeroshard {

class ShardServiceImpl;

class ServerMetrics {
 public:
  // `registry` outlives this object.
  ServerMetrics(MetricsRegistry* registry, Placement placement);

  // One finished RPC: `full_method` as gRPC names it
  // ("/zeroshard.v1.ShardService/Gather": labelled "Gather"; other services
  // keep "grpc.health.v1.Health/Check"), its status code and duration.
  void ObserveRpc(absl::string_view full_method, grpc::StatusCode code,
                  double seconds);
  // Observes the write and copy time of `snap` once it is written; each
  // snapshot (step, directory) is observed once however often this is
  // called for it.
  void WatchSnapshot(const std::shared_ptr<ShardSnapshot>& snap);
  // Sets the gauges and mirrored counters from the service's state.
  void Collect(ShardServiceImpl& service);

  // Interceptor factories for grpc::ServerBuilder: one that times every
  // call into ObserveRpc.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  Interceptors();

 private:
  MetricsRegistry* const registry_;
  const Placement placement_;
  absl::Mutex mu_;
  // The snapshots watched, newest last (a few only: each is watched when a
  // Checkpoint call names it, and steps only grow).
  std::deque<std::pair<uint64_t, std::string>> watched_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SERVER_METRICS_H_
