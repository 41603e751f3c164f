#include "worker/engine/resume.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint_manifest.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::Status FinishHalfAppliedStep(const ShardCluster& cluster,
                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const auto all = cluster.InspectAll();
    uint64_t lo = UINT64_MAX, hi = 0;
    bool busy = false;
    for (const auto& r : all) {
      RETURN_IF_ERROR(r.status());
      if (!r->initialized) return absl::OkStatus();
      busy = busy || r->partial_chunks != 0;
      lo = std::min<uint64_t>(lo, r->min_version);
      hi = std::max<uint64_t>(hi, r->max_version);
    }
    if (busy) {
      // A server is still applying what it was sent: wait for it.
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "a server was still applying a step after ",
            absl::FormatDuration(timeout)));
      }
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    if (hi != lo + 1) return absl::OkStatus();
    // Finishable only when every server still at `lo` holds prepared
    // pushes of step lo, all of one attempt.
    std::optional<uint64_t> attempt;
    for (const auto& r : all) {
      if (r->max_version != lo) continue;
      if (r->prepared_elems == 0 || r->prepared_step != lo ||
          (attempt.has_value() && *attempt != r->prepared_attempt)) {
        return absl::OkStatus();
      }
      attempt = r->prepared_attempt;
    }
    ZS_LOG(WARNING) << "step " << lo << " is applied on some servers only "
                    << "(its rank 0 died applying it); finishing it from the "
                    << "prepared pushes of attempt " << *attempt;
    return cluster.ApplyStep(lo, *attempt,
                        std::max(deadline - absl::Now(), absl::Seconds(1)))
        .status();
  }
}

absl::Status ResumeServers(const TrainingConfig& config, int rank,
                           const std::string& dir, ShardCluster* client,
                           WorkerGroup* group) {
  if (rank == 0) {
    RETURN_IF_ERROR(FinishHalfAppliedStep(
        *client, absl::Seconds(config.cluster.step_timeout_s)));
  }
  // --resume=DIR (its newest checkpoint) or DIR/step-N (that one).
  const ResumePoint at = ParseResumePath(dir);
  if (rank == 0 && !dir.empty()) {
    // A server is fresh when nothing was ever applied to it: a new run, or
    // a server restarted (its state is gone) while the others live on.
    std::vector<std::string> fresh_servers;
    uint64_t newest = 0;
    const auto inspected = client->InspectAll();
    for (size_t k = 0; k < inspected.size(); ++k) {
      const auto& r = inspected[k];
      RETURN_IF_ERROR(r.status());
      if (r->max_version == 0 && r->partial_chunks == 0) {
        fresh_servers.push_back(client->address(k));
      }
      newest = std::max<uint64_t>(newest, r->max_version);
    }
    const bool all_fresh = fresh_servers.size() == inspected.size();
    // A directory not made yet holds no checkpoint (a crash before the
    // first one).
    absl::StatusOr<std::vector<uint64_t>> listed = ListCheckpoints(at.dir);
    if (!listed.ok() && !absl::IsNotFound(listed.status())) {
      return listed.status();
    }
    const std::vector<uint64_t> steps =
        listed.ok() ? *std::move(listed) : std::vector<uint64_t>();
    if (at.step.has_value() && !fresh_servers.empty() &&
        std::find(steps.begin(), steps.end(), *at.step) == steps.end()) {
      return absl::NotFoundError(absl::StrCat(
          "--resume=", dir, ": ", at.dir, " holds no complete checkpoint at "
          "step ", *at.step));
    }
    if (fresh_servers.empty()) {
      ZS_LOG(INFO) << "servers already hold a run; not restoring from "
                   << dir;
    } else if (steps.empty() && all_fresh) {
      // Crash recovery before the first checkpoint: the run starts over.
      ZS_LOG(WARNING) << "no complete checkpoint in " << dir
                      << " yet; training starts from step 0";
    } else if (steps.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server(s) ", absl::StrJoin(fresh_servers, ", "),
          " restarted and lost their state while the others stand at step ",
          newest, ", and ", dir,
          " holds no complete checkpoint to restore them all from: restart "
          "every server to start the run over"));
    } else {
      if (!all_fresh) {
        ZS_LOG(WARNING) << "server(s) " << absl::StrJoin(fresh_servers, ", ")
                        << " restarted while the others stand at step "
                        << newest << "; restoring every server from the "
                        << "newest checkpoint in " << dir;
      }
      ASSIGN_OR_RETURN(
          auto restored,
          client->Restore(at.dir, at.step,
                          absl::Seconds(config.cluster.startup_timeout_s)));
      uint64_t bytes = 0;
      double seconds = 0;
      for (const auto& r : restored) {
        bytes += r.bytes_read;
        seconds = std::max(seconds, r.seconds);
      }
      ZS_LOG(INFO) << "restored " << restored.size() << " servers from "
                   << dir << " at step " << restored[0].version << " ("
                   << bytes << " bytes read, " << seconds << " s)";
    }
  }
  return group->Barrier();
}

absl::Status ExplainServerRestart(const ShardCluster& cluster, uint64_t step,
                                  const absl::Status& failed,
                                  absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  // Not the servers this client left (replicas): their slots went on from
  // the other copies, and one left because it hung would hold the
  // explanation for the control deadline.
  std::vector<absl::StatusOr<ServerStatus>> inspected(
      cluster.num_servers(), absl::CancelledError("left"));
  {
    std::vector<std::thread> asks;
    for (int k = 0; k < cluster.num_servers(); ++k) {
      if (cluster.ServerGone(k)) continue;
      asks.emplace_back([&, k] { inspected[k] = cluster.Inspect(k); });
    }
    for (std::thread& t : asks) t.join();
  }
  // A killed server is unreachable until its replacement listens (a pod's
  // restart takes seconds, longer on a loaded node): ask again until it
  // answers or `wait` is over, so that the error can say which it was.
  for (;;) {
    std::vector<size_t> pending;
    for (size_t k = 0; k < inspected.size(); ++k) {
      if (absl::IsUnavailable(inspected[k].status())) pending.push_back(k);
    }
    if (pending.empty() || absl::Now() >= deadline) break;
    // A short slice each, so that one server that never returns does not
    // keep the others from being seen back.
    const absl::Time slice =
        std::min(deadline, absl::Now() + absl::Milliseconds(250));
    for (size_t k : pending) {
      const int server = static_cast<int>(k);
      if (cluster.WaitForConnected(server, slice)) {
        inspected[k] = cluster.Inspect(server);
      }
    }
    if (absl::Now() < slice) absl::SleepFor(slice - absl::Now());
  }
  std::vector<std::string> restarted, unreachable;
  for (size_t k = 0; k < inspected.size(); ++k) {
    const std::string who = absl::StrCat(k, " (", cluster.address(k), ")");
    if (inspected[k].ok() && !inspected[k]->initialized) {
      restarted.push_back(who);
    } else if (absl::IsUnavailable(inspected[k].status())) {
      unreachable.push_back(who);
    }
  }
  if (!restarted.empty()) {
    return absl::Status(
        failed.code(),
        absl::StrCat("server ", absl::StrJoin(restarted, ", server "),
                     " restarted during step ", step,
                     " and holds no state: this worker stops, to be "
                     "restarted; then rank 0 restores every server from the "
                     "newest checkpoint of --resume (cause: ",
                     failed.message(), ")"));
  }
  if (!unreachable.empty()) {
    return absl::Status(
        failed.code(),
        absl::StrCat("server ", absl::StrJoin(unreachable, ", server "),
                     " unreachable since step ", step, " (still after ",
                     absl::FormatDuration(wait),
                     "): this worker stops (cause: ", failed.message(), ")"));
  }
  return failed;
}

absl::StatusOr<std::optional<LossScalerState>> FindLossScalerState(
    uint64_t step, const std::string& dir, KvClient* kv) {
  absl::StatusOr<std::string> rec = kv->TryGet(LossScalerKvKey(step));
  if (rec.ok()) {
    ASSIGN_OR_RETURN(auto parsed, ParseLossScalerRecord(*rec));
    if (parsed.first == step) return parsed.second;
  } else if (!absl::IsNotFound(rec.status())) {
    return rec.status();
  }
  if (!dir.empty()) {
    absl::StatusOr<CheckpointManifest> m =
        ReadCheckpointManifest(ParseResumePath(dir).dir, step);
    if (m.ok()) return m->loss_scaler;
    if (!absl::IsNotFound(m.status())) return m.status();
  }
  return std::nullopt;
}

}  // namespace zeroshard
