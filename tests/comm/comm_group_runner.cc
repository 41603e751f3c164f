#include "tests/comm/comm_group_runner.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rendezvous.h"

namespace zeroshard {

GroupOptions TestGroupOptions(absl::Duration timeout) {
  static std::atomic<int> counter{0};
  GroupOptions options;
  options.group = absl::StrCat("test-", counter.fetch_add(1));
  options.timeout = timeout;
  return options;
}

std::vector<absl::Status> RunPartialGroup(const std::string& backend, int size,
                                          const std::vector<int>& joining,
                                          const GroupOptions& options,
                                          const RankBody& body) {
  InMemoryRendezvousStore store;
  std::vector<absl::Status> statuses(size, absl::CancelledError("not joined"));
  std::vector<std::thread> threads;
  for (int rank : joining) {
    threads.emplace_back([&, rank] {
      auto group = CreateWorkerGroup(backend, rank, size, &store, options);
      if (!group.ok()) {
        statuses[rank] = group.status();
        return;
      }
      statuses[rank] = body(**group);
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

std::vector<absl::Status> RunGroup(const std::string& backend, int size,
                                   const GroupOptions& options,
                                   const RankBody& body) {
  std::vector<int> all;
  for (int r = 0; r < size; ++r) all.push_back(r);
  return RunPartialGroup(backend, size, all, options, body);
}

}  // namespace zeroshard
