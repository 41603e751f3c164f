// With replicas, the catch-ups of servers that answer again, for a caller
// that takes no checkpoints of its own between steps (the PyTorch
// front-end's rank 0; docs/DESIGN.md, "Replicas"). Start, between steps,
// opens the other copies' step logs (client/catch_up.h) and arms a
// checkpoint of the servers' files under `directory` (a folder of its own:
// no engine state is written there, so nothing resumes from it), and a
// thread per server waits for it, commits it, restores the server's copies
// from it and replays the logged pushes round after round while training
// goes on. Finish, at a later step boundary (every slot stands at the step,
// nothing is being applied), replays the last pushes of each catch-up whose
// thread is done and marks the server back on this client; the caller tells
// the other ranks.
//
//   ReplicaCatchUps catch_ups(&cluster, init, dir + "/catch-up");
//   // between steps, rank 0:
//   ASSIGN_OR_RETURN(auto ended, catch_ups.Finish(step));  // back, failed
//   for (int k : fresh) if (!catch_ups.Busy(k)) catch_ups.Start(k, step);
//
// A failure (the server dies again, a log outgrows its bound) is logged and
// its logs are dropped; Failures(k) counts them, and the caller decides
// whether to start again. Not thread-safe: one caller, between steps.
#ifndef ZEROSHARD_CLIENT_REPLICA_CATCH_UPS_H_
#define ZEROSHARD_CLIENT_REPLICA_CATCH_UPS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/init_options.h"
#include "client/shard_cluster.h"

namespace zeroshard {

class ReplicaCatchUps {
 public:
  // `cluster` outlives this; `init` is the run's Init (replaces what a
  // server held); `timeout` bounds the wait for the checkpoint.
  ReplicaCatchUps(ShardCluster* cluster, InitOptions init,
                  std::string directory, absl::Duration timeout);
  // Stops the threads (at their next call) and drops the open logs.
  ~ReplicaCatchUps();
  ReplicaCatchUps(const ReplicaCatchUps&) = delete;
  ReplicaCatchUps& operator=(const ReplicaCatchUps&) = delete;

  // Between steps, before `step` runs: server k catches up from a
  // checkpoint of `step`. An error (logs not opened, checkpoint not armed)
  // counts as a failure and changes nothing.
  absl::Status Start(int k, uint64_t step);
  bool Busy(int k) const { return running_.count(k) > 0; }
  int Failures(int k) const;
  // Server k took its copies back another way (the caller's checkpoint and
  // restore after too many failures): its count starts again.
  void ForgetFailures(int k) { failures_.erase(k); }

  struct Ended {
    std::vector<int> back;    // marked back on this client at `step`
    std::vector<int> failed;  // said, logs dropped, counted
  };
  // Between steps, before `step` runs: ends the catch-ups whose threads are
  // done.
  Ended Finish(uint64_t step);

 private:
  struct Run {
    int k = 0;
    uint64_t from = 0;
    absl::Time started;
    std::thread thread;
    std::atomic<bool> done{false};
    absl::Status status;
    uint64_t version = 0;
    int rounds = 0;
  };
  absl::Status RunThread(Run* r);
  void Fail(int k, uint64_t from, const absl::Status& why);

  ShardCluster* const cluster_;
  const InitOptions init_;
  const std::string directory_;
  const absl::Duration timeout_;
  std::map<int, std::unique_ptr<Run>> running_;
  std::map<int, int> failures_;
  std::atomic<uint64_t> step_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_REPLICA_CATCH_UPS_H_
