#include "tools/train/recovery.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kv_client.h"
#include "client/shard_cluster.h"
#include "common/logging.h"
#include "common/loss_scaler.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// Where the servers stand once nothing is being applied any more: every
// chunk at `version`, or some (a step whose ApplyStep was under way when
// its sender died) at version + 1. Waits (bounded) for a server that is
// still applying.
struct ServerStand {
  bool ok = false;
  uint64_t min_version = 0, max_version = 0;
};
ServerStand InspectStand(const ShardCluster& servers) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    ServerStand stand{true, UINT64_MAX, 0};
    bool busy = false;
    for (const auto& r : servers.InspectAll()) {
      if (!r.ok() || !r->initialized) return ServerStand();
      busy = busy || r->partial_chunks != 0;
      stand.min_version = std::min<uint64_t>(stand.min_version, r->min_version);
      stand.max_version = std::max<uint64_t>(stand.max_version, r->max_version);
    }
    if (!busy) return stand;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return ServerStand();
}

// New workers on live servers speak a newer attempt, which drops the old
// attempt's keys from server 0's store (the failed rendezvous must not
// linger). The FP16 loss-scaler records a successor reads for `steps`
// (worker/engine/resume.h) are copied to the new attempt first.
absl::Status CarryLossScalerRecords(const std::vector<std::string>& holders,
                                    const ShardClientOptions& options,
                                    uint64_t attempt,
                                    std::initializer_list<uint64_t> steps,
                                    absl::Duration timeout) {
  if (attempt == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<KvClient> old_kv,
                   KvClient::Connect(holders, {options.run_id, attempt - 1},
                                     timeout, options.security));
  std::vector<std::pair<std::string, std::string>> records;
  for (uint64_t step : steps) {
    absl::StatusOr<std::string> rec = old_kv->TryGet(LossScalerKvKey(step));
    if (rec.ok()) {
      records.emplace_back(LossScalerKvKey(step), *std::move(rec));
    } else if (!absl::IsNotFound(rec.status()) &&
               !absl::IsAborted(rec.status())) {
      return rec.status();
    }
  }
  if (records.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<KvClient> kv,
                   KvClient::Connect(holders, {options.run_id, attempt},
                                     timeout, options.security));
  for (const auto& [key, value] : records) {
    RETURN_IF_ERROR(kv->Set(key, value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardClientOptions> LauncherClientOptions(
    const TrainClusterPlan& plan) {
  ShardClientOptions options;
  options.run_id = plan.run_id;
  options.replicas = plan.replicas;
  ASSIGN_OR_RETURN(options.security,
                   LoadClientCredentials(plan.credentials_dir, "admin"));
  return options;
}

absl::StatusOr<std::string> Recover(const TrainingConfig& cfg,
                                    const TrainOptions& o, uint64_t attempt,
                                    const std::atomic<bool>* interrupted,
                                    TrainClusterPlan* plan,
                                    std::unique_ptr<TrainCluster>* cluster) {
  plan->attempt = attempt;
  absl::StatusOr<ShardClientOptions> options = LauncherClientOptions(*plan);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::unique_ptr<ShardCluster>> channels =
      ShardCluster::Connect((*cluster)->server_addresses(), *options);
  if ((*cluster)->ServersAlive() && channels.ok()) {
    (*cluster)->StopWorkers();
    const ServerStand stand = InspectStand(**channels);
    if (stand.ok && stand.max_version == stand.min_version) {
      // Nothing of the step is applied anywhere: new workers redo it; the
      // old attempt's prepared pushes are dropped when the new one speaks.
      RETURN_IF_ERROR(CarryLossScalerRecords(
          KvHolders((*cluster)->server_addresses(), plan->replicas), *options,
          attempt, {stand.min_version},
          absl::Seconds(cfg.cluster.startup_timeout_s)));
      RETURN_IF_ERROR((*cluster)->RestartWorkers(attempt));
      return absl::StrCat("new workers redo step ", stand.min_version,
                          " on the same servers");
    }
    if (stand.ok && stand.max_version == stand.min_version + 1) {
      // ApplyStep had reached some servers: every worker had prepared
      // everywhere, so the step is finished from what the servers hold.
      const absl::Status applied =
          (*channels)
              ->ApplyStep(stand.min_version, attempt - 1,
                          absl::Seconds(cfg.cluster.step_timeout_s))
              .status();
      if (applied.ok()) {
        RETURN_IF_ERROR(CarryLossScalerRecords(
            KvHolders((*cluster)->server_addresses(), plan->replicas), *options,
            attempt, {stand.min_version + 1},
            absl::Seconds(cfg.cluster.startup_timeout_s)));
        RETURN_IF_ERROR((*cluster)->RestartWorkers(attempt));
        return absl::StrCat("step ", stand.min_version,
                            " finished from the servers' prepared pushes; "
                            "new workers go on from step ",
                            stand.min_version + 1);
      }
      ZS_LOG(WARNING) << "finishing step " << stand.min_version
                      << " failed: " << applied.message();
    }
  }
  if (!plan->server_addresses.empty()) {
    return absl::FailedPreconditionError(
        "the given servers are not at a clean step; restore them "
        "(zeroshard-ctl restore) and resume");
  }
  (*cluster)->StopAll(absl::Seconds(5));
  (*cluster)->KeepLogs();
  const std::string kept =
      absl::StrCat("; attempt ", attempt - 1, "'s logs are kept as ",
                   (*cluster)->logs_dir(), "/*.log.", attempt - 1);
  cluster->reset();
  plan->resume_dir = cfg.cluster.checkpoint.dir.empty()
                         ? o.resume_dir
                         : cfg.cluster.checkpoint.dir;
  ASSIGN_OR_RETURN(*cluster, TrainCluster::Start(*plan, interrupted));
  if (plan->resume_dir.empty()) {
    return absl::StrCat(
        "all processes restarted from step 0 (no checkpoint "
        "directory is configured)",
        kept);
  }
  return absl::StrCat("all processes restarted from the newest checkpoint in ",
                      plan->resume_dir, kept);
}

}  // namespace zeroshard
