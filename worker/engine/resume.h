// Continuing a run (docs/DESIGN.md, "Checkpoints" and "Crash recovery").
//
// The servers hold the run's state; a worker that starts finds them either
// fresh (version 0: a new run, or servers restarted after a crash) or
// holding some step s (workers restarted while the servers lived on), or
// both (one server restarted). ResumeServers restores every server from the
// newest checkpoint of the resume directory when any is fresh; the loss
// scaler then resumes from the state rank 0 left in the key-value store for
// the start step, or from that checkpoint's manifest.
//
//   RETURN_IF_ERROR(ResumeServers(cfg, rank, resume_dir, client, group));
//   ASSIGN_OR_RETURN(uint64_t step, engine->StartStep());
//   ASSIGN_OR_RETURN(auto scaler, FindLossScalerState(step, resume_dir, kv));
//   if (scaler) RETURN_IF_ERROR(engine->RestoreLossScaler(*scaler));
#ifndef ZEROSHARD_WORKER_ENGINE_RESUME_H_
#define ZEROSHARD_WORKER_ENGINE_RESUME_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/kv_client.h"
#include "client/shard_cluster.h"
#include "common/config.h"
#include "common/loss_scaler.h"
#include "comm/collectives.h"

namespace zeroshard {

// Without a launcher (pod mode), rank 0 of a new attempt finishes a step
// whose ApplyStep reached only some servers before its sender died: when
// the servers stand at s and s + 1 and every one at s holds prepared pushes
// of step s, ApplyStep(s) goes to all (those done answer OK), as the
// launcher does (docs/DESIGN.md, "Crash recovery"). Otherwise OK, untouched.
absl::Status FinishHalfAppliedStep(const ShardCluster& cluster,
                                   absl::Duration timeout);

// Rank 0 first finishes a half-applied step (above). Then, when `dir` is
// non-empty and any server is at version 0 with nothing applied (a new run,
// or a server restarted while the others live on): restores all of them
// from the newest complete checkpoint in `dir`.
// With no checkpoint there, a run whose servers are all fresh starts from
// step 0 (a warning); one whose other servers stand at a step cannot go on
// (FAILED_PRECONDITION naming the restarted servers). Then all ranks meet
// at a barrier.
absl::Status ResumeServers(const TrainingConfig& config, int rank,
                           const std::string& dir, ShardCluster* client,
                           WorkerGroup* group);

// `failed` is a step's error. When a server has restarted meanwhile (it is
// not initialised: its state is gone), the error says so and what comes
// next: this worker exits, is restarted (by the launcher or the kubelet),
// and rank 0 restores every server from the newest checkpoint of --resume.
// A server that does not answer (UNAVAILABLE: killed, its replacement not
// yet listening) is asked again until `wait` is over; one still silent then
// is named as unreachable. Otherwise `failed` as it is.
absl::Status ExplainServerRestart(const ShardCluster& cluster, uint64_t step,
                                  const absl::Status& failed,
                                  absl::Duration wait);

// (The record format, LossScalerKvKey / LossScalerRecord /
// ParseLossScalerRecord, is common/loss_scaler.h's.)

// The loss scaler's state at the start of `step`: the key-value record when
// it is for `step`, else the manifest of a checkpoint of `step` in `dir`
// (when set), else nullopt (a fresh scaler).
absl::StatusOr<std::optional<LossScalerState>> FindLossScalerState(
    uint64_t step, const std::string& dir, KvClient* kv);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_RESUME_H_
