#include "server/server_metrics.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/shard_service_impl.h"

namespace zeroshard {
namespace {

constexpr absl::string_view kShardServicePrefix = "/zeroshard.v1.ShardService/";
constexpr size_t kWatchedSnapshots = 16;

// Times one call: from its creation (the call's start) to the status the
// server sends.
class RpcTimer : public grpc::experimental::Interceptor {
 public:
  RpcTimer(const char* method, ServerMetrics* metrics)
      : method_(method == nullptr ? "" : method),
        metrics_(metrics),
        start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->ObserveRpc(method_, methods->GetSendStatus().error_code(),
                           absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  ServerMetrics* metrics_;
  absl::Time start_;
};

class RpcTimerFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcTimerFactory(ServerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcTimer(info->method(), metrics_);
  }

 private:
  ServerMetrics* metrics_;
};

}  // namespace

ServerMetrics::ServerMetrics(MetricsRegistry* registry, Placement placement)
    : registry_(registry), placement_(placement) {}

void ServerMetrics::ObserveRpc(absl::string_view full_method,
                               grpc::StatusCode code, double seconds) {
  std::string method(absl::StartsWith(full_method, kShardServicePrefix)
                         ? full_method.substr(kShardServicePrefix.size())
                         : absl::StripPrefix(full_method, "/"));
  registry_
      ->histogram("zeroshard_rpc_duration_seconds",
                  "Duration of the RPCs this server served, from the call's "
                  "start to its status, by method and status code.",
                  LatencyBuckets(),
                  {{"method", std::move(method)},
                   {"code", absl::StatusCodeToString(
                                static_cast<absl::StatusCode>(code))}})
      .Observe(seconds);
}

void ServerMetrics::WatchSnapshot(const std::shared_ptr<ShardSnapshot>& snap) {
  {
    absl::MutexLock lock(&mu_);
    const std::pair<uint64_t, std::string> key(snap->step(), snap->directory());
    if (std::find(watched_.begin(), watched_.end(), key) != watched_.end()) {
      return;
    }
    watched_.push_back(key);
    if (watched_.size() > kWatchedSnapshots) watched_.pop_front();
  }
  // The registry outlives the snapshot's writer (ShardServer keeps this
  // object and the registry past the service that owns the snapshots).
  MetricsRegistry* registry = registry_;
  snap->AddWaiter([registry](const absl::StatusOr<SnapshotResult>& r) {
    if (!r.ok()) return;
    registry
        ->histogram("zeroshard_checkpoint_write_seconds",
                    "Time to write one shard checkpoint file.",
                    LatencyBuckets())
        .Observe(r->write_seconds);
    registry
        ->histogram("zeroshard_checkpoint_copy_seconds",
                    "Time the updates paused for one snapshot's chunk "
                    "copies, summed over its chunks.",
                    LatencyBuckets())
        .Observe(r->copy_seconds);
  });
}

void ServerMetrics::Collect(ShardServiceImpl& service) {
  registry_
      ->counter("zeroshard_rpc_received_bytes_total",
                "Payload bytes received (PushGrad, SetWeights, KvSet).")
      .SetTotal(static_cast<double>(service.counters().bytes_in()));
  registry_
      ->counter("zeroshard_rpc_sent_bytes_total",
                "Payload bytes sent (Gather, ReadSnapshot).")
      .SetTotal(static_cast<double>(service.counters().bytes_out()));
  absl::StatusOr<std::shared_ptr<ModelShard>> state = service.state();
  registry_->gauge("zeroshard_initialized", "1 once Init has run.")
      .Set(state.ok() ? 1 : 0);
  if (!state.ok()) return;
  const ModelShard& shard = **state;
  registry_
      ->counter("zeroshard_adamw_updated_elements_total",
                "Elements AdamW has updated (skipped steps excluded).")
      .SetTotal(static_cast<double>(shard.updated_elems()));
  const StepTracker::Summary summary = shard.versions();
  const char* kVersionHelp =
      "Version (steps applied) of the owned chunks: the lowest and highest.";
  registry_->gauge("zeroshard_chunk_version", kVersionHelp, {{"bound", "min"}})
      .Set(static_cast<double>(summary.min_version));
  registry_->gauge("zeroshard_chunk_version", kVersionHelp, {{"bound", "max"}})
      .Set(static_cast<double>(summary.max_version));
  for (const auto& [kind, bytes] : shard.BytesByKind()) {
    registry_
        ->gauge("zeroshard_state_bytes",
                "Bytes of the shard's state by kind and the placement "
                "(host, pinned, device) that holds them.",
                {{"placement", std::string(PlacementName(placement_))},
                 {"kind", kind}})
        .Set(static_cast<double>(bytes));
  }
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
ServerMetrics::Interceptors() {
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      out;
  out.push_back(std::make_unique<RpcTimerFactory>(this));
  return out;
}

}  // namespace zeroshard
