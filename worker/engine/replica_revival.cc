#include "worker/engine/replica_revival.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/init_options.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// How often rank 0 looks at the servers it left, and how long one look
// waits for an answer.
constexpr absl::Duration kLookEvery = absl::Milliseconds(250);
constexpr absl::Duration kLookTimeout = absl::Milliseconds(500);

}  // namespace

absl::StatusOr<std::string> ReplicaRevival::ReviveFresh(
    uint64_t step, const LossScalerState& scaler) {
  const std::vector<int> gone = client_->GoneServers();
  if (gone.empty() || absl::Now() < next_look_) return std::string();
  next_look_ = absl::Now() + kLookEvery;
  std::string back;
  for (int k : gone) {
    absl::StatusOr<bool> fresh = client_->AnswersFresh(k, kLookTimeout);
    if (!fresh.ok() || !*fresh) continue;  // not back yet
    if (!checkpoints_->enabled()) {
      if (!said_no_dir_) {
        ZS_LOG(WARNING) << "server " << k << " (" << client_->address(k)
                        << ") is back without state, but it can only take "
                           "its copies back from a checkpoint: set "
                           "zeroshard.checkpoint.dir; its slots stay on one "
                           "copy";
        said_no_dir_ = true;
      }
      continue;
    }
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(checkpoints_->CheckpointNow(step, scaler));
    RETURN_IF_ERROR(client_->ReviveServer(k, InitOptionsFor(config_),
                                          checkpoints_->dir(), step));
    ++revived_;
    ZS_LOG(INFO) << "server " << k << " (" << client_->address(k)
                 << ") took its copies back at step " << step << " in "
                 << absl::FormatDuration(absl::Now() - t0)
                 << " (the checkpoint of step " << step << ", then restore)";
    absl::StrAppend(&back, back.empty() ? "" : ",", k);
  }
  return back;
}

absl::Status ReplicaRevival::BeforeStep(uint64_t step,
                                        const LossScalerState& scaler) {
  if (config_.cluster.replicas < 2) return absl::OkStatus();
  std::string back;
  if (rank_ == 0) {
    ASSIGN_OR_RETURN(back, ReviveFresh(step, scaler));
  }
  // Every rank waits here until rank 0 has restored what it revived.
  RETURN_IF_ERROR(group_->Broadcast(&back, 0));
  if (rank_ == 0) return absl::OkStatus();
  for (absl::string_view s : absl::StrSplit(back, ',', absl::SkipEmpty())) {
    int k = -1;
    if (!absl::SimpleAtoi(s, &k) || k < 0 || k >= client_->num_servers()) {
      return absl::InternalError(
          absl::StrCat("rank 0 named server '", s, "' as back"));
    }
    client_->MarkServerBack(k);
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
