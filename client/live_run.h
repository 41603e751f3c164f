// Whether the servers serve a live run: one whose workers still push. The
// commands that replace the servers' state (zeroshard-ctl init and restore)
// and a second zeroshard-train on the same servers refuse it, naming the
// run, since either would end it.
//
// A run is live when a server admitted one of its pushes within the window
// (every server reports the seconds since its last push, Inspect) and the
// run did not say it ended: rank 0 of the C++ workers after its last step,
// zeroshard-train when it stops its workers on servers it did not start,
// zeroshard-ctl smoke and the PyTorch front-end's close mark the end in
// server 0's key-value store (MarkRunEnded).
//
//   ASSIGN_OR_RETURN(std::optional<LiveRunInfo> live,
//                    FindLiveRun(cluster, kLiveRunWindowSeconds));
//   if (live) refuse: DescribeLiveRun(*live)
#ifndef ZEROSHARD_CLIENT_LIVE_RUN_H_
#define ZEROSHARD_CLIENT_LIVE_RUN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/server_status.h"
#include "client/shard_cluster.h"

namespace zeroshard {

// A run that pushed this recently is taken as live unless it ended.
inline constexpr double kLiveRunWindowSeconds = 60;
// The key (in the run's scope of server 0's store) that marks its end.
inline constexpr char kRunEndedKey[] = "zeroshard/run-ended";

struct LiveRunInfo {
  std::string run_id;
  uint64_t attempt = 0;
  uint64_t step = 0;               // the newest version any server holds
  double seconds_since_push = 0;   // the most recent push over the servers
};

// From the servers' statuses alone: the run that pushed within
// `window_seconds`, or none.
std::optional<LiveRunInfo> RecentlyPushedRun(
    const std::vector<ServerStatus>& servers, double window_seconds);

// RecentlyPushedRun over InspectAll, less a run that marked its end. An
// unreachable server is an error naming it.
absl::StatusOr<std::optional<LiveRunInfo>> FindLiveRun(
    const ShardCluster& cluster, double window_seconds);
// The same from `servers`, every server's status the caller already has.
absl::StatusOr<std::optional<LiveRunInfo>> FindLiveRun(
    const ShardCluster& cluster, const std::vector<ServerStatus>& servers,
    double window_seconds);

// Marks the end of (run_id, attempt) at step `step` in server 0's store.
absl::Status MarkRunEnded(const ShardCluster& cluster, const std::string& run_id,
                          uint64_t attempt, uint64_t step);

// "run 'R' (attempt A, at step S; its last push 1.2 s ago)".
std::string DescribeLiveRun(const LiveRunInfo& run);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_LIVE_RUN_H_
