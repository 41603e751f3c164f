// The second phase of the two-phase step commit (docs/DESIGN.md, "Crash
// recovery"): once every worker's pushes of a step are prepared on every
// server (PushGradCommit.prepare), one caller — worker rank 0, or the
// launcher finishing a step whose rank 0 died — tells every server to apply
// them.
//
//   ASSIGN_OR_RETURN(PushResult r, ApplyStepAll(channels, step, attempt,
//                                               absl::Seconds(60)));
#ifndef ZEROSHARD_CLIENT_APPLY_STEP_H_
#define ZEROSHARD_CLIENT_APPLY_STEP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/push_session.h"
#include "client/shard_channels.h"

namespace zeroshard {

// ApplyStep(step, attempt) on every server in parallel (UNAVAILABLE
// retried: a server that applied already answers OK); the sums of what
// they applied. The first error, naming its server, otherwise.
absl::StatusOr<PushResult> ApplyStepAll(const ShardChannels& channels,
                                        uint64_t step, uint64_t attempt,
                                        absl::Duration timeout);
// The same on server k alone (fault tests: a sender that dies half way).
absl::Status ApplyStepOn(const ShardChannels& channels, int k, uint64_t step,
                         uint64_t attempt, absl::Duration timeout);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_APPLY_STEP_H_
