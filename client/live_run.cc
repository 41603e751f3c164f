#include "client/live_run.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/kv_client.h"
#include "common/status_macros.h"

namespace zeroshard {

std::optional<LiveRunInfo> RecentlyPushedRun(
    const std::vector<ServerStatus>& servers, double window_seconds) {
  std::optional<LiveRunInfo> live;
  for (const ServerStatus& s : servers) {
    if (!s.initialized || s.seconds_since_push < 0 ||
        s.seconds_since_push > window_seconds) {
      continue;
    }
    if (!live.has_value()) {
      live = LiveRunInfo{s.run_id, 0, 0, s.seconds_since_push};
    }
    live->attempt = std::max({live->attempt, s.attempt, s.prepared_attempt});
    live->seconds_since_push =
        std::min(live->seconds_since_push, s.seconds_since_push);
  }
  if (live.has_value()) {
    for (const ServerStatus& s : servers) {
      if (s.initialized) live->step = std::max(live->step, s.max_version);
    }
  }
  return live;
}

absl::StatusOr<std::optional<LiveRunInfo>> FindLiveRun(
    const ShardCluster& cluster, double window_seconds) {
  std::vector<ServerStatus> servers;
  std::vector<absl::StatusOr<ServerStatus>> all = cluster.InspectAll();
  for (size_t k = 0; k < all.size(); ++k) {
    if (!all[k].ok()) {
      return absl::Status(all[k].status().code(),
                          absl::StrCat("server ", k, " (", cluster.address(static_cast<int>(k)),
                                       "): Inspect: ",
                                       all[k].status().message()));
    }
    servers.push_back(*std::move(all[k]));
  }
  return FindLiveRun(cluster, servers, window_seconds);
}

absl::StatusOr<std::optional<LiveRunInfo>> FindLiveRun(
    const ShardCluster& cluster, const std::vector<ServerStatus>& servers,
    double window_seconds) {
  std::optional<LiveRunInfo> live = RecentlyPushedRun(servers, window_seconds);
  if (!live.has_value()) return live;
  ASSIGN_OR_RETURN(std::unique_ptr<KvClient> kv,
                   cluster.OpenKv({live->run_id, live->attempt}));
  absl::StatusOr<std::string> ended = kv->TryGet(kRunEndedKey);
  if (ended.ok()) return std::optional<LiveRunInfo>();
  if (!absl::IsNotFound(ended.status())) return ended.status();
  return live;
}

absl::Status MarkRunEnded(const ShardCluster& cluster, const std::string& run_id,
                          uint64_t attempt, uint64_t step) {
  if (cluster.ServerGone(0)) {
    // Its store went with it (replicas kept the run going without it).
    return absl::UnavailableError(
        "server 0 is gone, and its key-value store with it");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<KvClient> kv,
                   cluster.OpenKv({run_id, attempt}));
  return kv->Set(kRunEndedKey, absl::StrCat(step));
}

std::string DescribeLiveRun(const LiveRunInfo& run) {
  return absl::StrCat("run '", run.run_id, "' (attempt ", run.attempt,
                      ", at step ", run.step, "; its last push ",
                      absl::StrFormat("%.1f", run.seconds_since_push),
                      " s ago)");
}

}  // namespace zeroshard
