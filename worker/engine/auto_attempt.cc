#include "worker/engine/auto_attempt.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/loss_scaler.h"
#include "common/logging.h"

namespace zeroshard {
namespace {

// The newer attempt an ABORTED probe of `attempt` names (server/kv_store.cc:
// "attempt X of run 'R' is over: attempt N has started ..."), or 0.
uint64_t NewerAttemptIn(const absl::Status& status, const std::string& run_id) {
  const std::string marker =
      absl::StrCat(" of run '", run_id, "' is over: attempt ");
  const absl::string_view msg = status.message();
  const size_t at = msg.find(marker);
  if (at == absl::string_view::npos) return 0;
  absl::string_view rest = msg.substr(at + marker.size());
  size_t digits = 0;
  while (digits < rest.size() && digits < 20 && rest[digits] >= '0' &&
         rest[digits] <= '9') {
    ++digits;
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(rest.substr(0, digits), &n)) return 0;
  return n;
}

}  // namespace

std::string AttemptJoinKey(int rank) {
  return absl::StrCat("zs/attempt/join/", rank);
}

std::string ProcessToken() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return absl::StrCat(host, "/", getpid(), "/",
                      absl::ToUnixMicros(absl::Now()), "/", rd());
}

absl::StatusOr<uint64_t> JoinAutoAttempt(const KvClient& kv,
                                         const ShardCluster& cluster,
                                         int rank, const std::string& token,
                                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string& run_id = kv.scope().run_id;
  const std::string key = AttemptJoinKey(rank);
  // 1. The highest attempt the servers have seen push.
  uint64_t pushed = 0;
  for (const auto& r : cluster.InspectAll()) {
    if (!r.ok()) return r.status();
    pushed = std::max({pushed, r->attempt, r->prepared_attempt});
  }
  uint64_t probe = pushed;
  for (int round = 0;; ++round) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank, " could not join an attempt of run '", run_id,
          "' within ", absl::FormatDuration(timeout), " (", round,
          " rounds): other workers keep starting newer attempts"));
    }
    // 2. The store's attempt, probing upward from `probe`.
    absl::StatusOr<std::string> found =
        kv.WithAttempt(probe)->TryGet(key);
    if (absl::IsAborted(found.status())) {
      probe = std::max(probe + 1, NewerAttemptIn(found.status(), run_id));
      continue;
    }
    if (!found.ok() && !absl::IsNotFound(found.status())) {
      return found.status();
    }
    // 3. Join the store's attempt, or start the next one.
    const bool restarted = found.ok() && *found != token;
    const bool registered = found.ok() && *found == token;
    uint64_t chosen = probe;
    if (restarted || (!registered && pushed >= probe)) chosen = probe + 1;
    // The FP16 loss scaler's records (common/loss_scaler.h) go on to the
    // new attempt, as the launcher copies them: read before starting it.
    std::vector<std::pair<std::string, std::string>> carried;
    absl::Status read_old;
    for (uint64_t slot = 0; chosen != probe && slot < 2; ++slot) {
      absl::StatusOr<std::string> rec =
          kv.WithAttempt(probe)->TryGet(LossScalerKvKey(slot));
      if (rec.ok()) {
        carried.emplace_back(LossScalerKvKey(slot), *std::move(rec));
      } else if (!absl::IsNotFound(rec.status())) {
        read_old = rec.status();
        break;
      }
    }
    if (absl::IsAborted(read_old)) continue;  // probe again
    if (!read_old.ok()) return read_old;
    // 4. Register.
    std::unique_ptr<KvClient> joined = kv.WithAttempt(chosen);
    absl::Status set = joined->Set(key, token);
    for (const auto& [rec_key, value] : carried) {
      if (!set.ok()) break;
      absl::StatusOr<std::string> there = joined->TryGet(rec_key);
      if (absl::IsNotFound(there.status())) {
        set = joined->Set(rec_key, value);
      } else {
        set = there.status();
      }
    }
    if (absl::IsAborted(set)) {
      probe = std::max(chosen + 1, NewerAttemptIn(set, run_id));
      continue;
    }
    if (!set.ok()) return set;
    ZS_LOG(INFO) << "rank " << rank << " joins attempt " << chosen
                 << " of run '" << run_id << "' ("
                 << (chosen == probe ? "started by a peer"
                     : restarted    ? "this rank restarted"
                     : pushed == 0 && probe == 0
                         ? "a new run"
                         : "attempt " + std::to_string(probe) +
                               " has pushed already")
                 << "; servers saw pushes of attempt " << pushed << ")";
    return chosen;
  }
}

}  // namespace zeroshard
