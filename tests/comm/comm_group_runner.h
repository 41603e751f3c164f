// Runs N ranks of a WorkerGroup as threads of this process, over one
// InMemoryRendezvousStore: each thread creates its group (backend, rank, N)
// and runs `body` on it. Returns each rank's status (creation failure or the
// body's result). Every thread is joined before returning; bounded waits are
// the groups' own timeouts.
//
//   auto statuses = RunGroup("gloo", 3, Options(), [](WorkerGroup& g) {
//     return g.Barrier();
//   });
#ifndef ZEROSHARD_TESTS_WORKER_COMM_COMM_GROUP_RUNNER_H_
#define ZEROSHARD_TESTS_WORKER_COMM_COMM_GROUP_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/collectives.h"

namespace zeroshard {

using RankBody = std::function<absl::Status(WorkerGroup& group)>;

// Options with a unique group name per call and a short test timeout.
GroupOptions TestGroupOptions(absl::Duration timeout = absl::Seconds(10));

std::vector<absl::Status> RunGroup(const std::string& backend, int size,
                                   const GroupOptions& options,
                                   const RankBody& body);

// As RunGroup, but only `joining` ranks start (the others never join).
std::vector<absl::Status> RunPartialGroup(const std::string& backend, int size,
                                          const std::vector<int>& joining,
                                          const GroupOptions& options,
                                          const RankBody& body);

}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_WORKER_COMM_COMM_GROUP_RUNNER_H_
