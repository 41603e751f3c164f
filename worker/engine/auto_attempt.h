// --attempt=auto: the worker group's incarnation chosen without a launcher
// (docs/DESIGN.md, "Pod mode").
//
// The launcher numbers attempts itself (--attempt=K); in Kubernetes each
// worker pod is restarted alone, with the same flags, so the workers agree
// on an attempt through server 0's key-value store instead. Each rank
// registers "zs/attempt/join/<rank>" (value: a token naming this process)
// in the attempt it joins. JoinAutoAttempt:
//  1. T = the highest push attempt any server has seen (Inspect.attempt).
//  2. A = the store's current attempt for the run, found by probing from T
//     upward (a probe at an attempt older than the store's is ABORTED,
//     which names the newer one; probing never moves the store past A).
//  3. If this rank is registered in A by another process (a restart), or A
//     has pushed already (T == A, which is also the case of a brand-new run
//     at 0 and of a server 0 that restarted and lost its store), the rank
//     starts attempt A + 1; otherwise it joins A.
//  4. It registers in the chosen attempt; ABORTED (someone started a newer
//     one meanwhile) goes back to 2. A rank starting A + 1 carries the FP16
//     loss scaler's records of A over to it (as the launcher does).
// Starting A + 1 drops A's keys and fails A's waiters with ABORTED, so an
// attempt never reads an earlier attempt's keys; the ranks still in A fail
// (their peer died, or ABORTED from the store), are restarted and join
// A + 1, since they are not registered there. Several ranks restarting at
// once each start A + 1 or find it started: they meet in one attempt.
//
//   ASSIGN_OR_RETURN(uint64_t attempt,
//                    JoinAutoAttempt(*kv, *cluster, rank, token,
//                                    absl::Seconds(60)));
#ifndef ZEROSHARD_WORKER_ENGINE_AUTO_ATTEMPT_H_
#define ZEROSHARD_WORKER_ENGINE_AUTO_ATTEMPT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/kv_client.h"
#include "client/shard_cluster.h"

namespace zeroshard {

// The key a rank registers in the attempt it joins.
std::string AttemptJoinKey(int rank);

// A token naming this process (host, pid, start time): a rank that finds
// its own token registered has not restarted.
std::string ProcessToken();

// Steps 1-4 above; `kv` names server 0 and the run (its attempt is not
// used). Bounded by `timeout`: DEADLINE_EXCEEDED after it.
absl::StatusOr<uint64_t> JoinAutoAttempt(const KvClient& kv,
                                         const ShardCluster& cluster,
                                         int rank, const std::string& token,
                                         absl::Duration timeout);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_AUTO_ATTEMPT_H_
