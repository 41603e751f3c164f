// FileRendezvousStore: a RendezvousStore in a directory, for tests whose
// ranks are separate processes on one machine (the in-memory store cannot
// cross processes). Each key is one file, written to a temporary name and
// renamed, so a reader sees a whole value or none. Waits poll every 2 ms and
// are bounded by their timeout.
//
//   FileRendezvousStore store("/tmp/zs-comm-XXXX");
//   RETURN_IF_ERROR(store.Set("a", "1"));
#ifndef ZEROSHARD_TESTS_WORKER_COMM_COMM_FILE_STORE_H_
#define ZEROSHARD_TESTS_WORKER_COMM_COMM_FILE_STORE_H_

#include <string>
#include <vector>

#include "common/rendezvous.h"

namespace zeroshard {

class FileRendezvousStore : public RendezvousStore {
 public:
  // `dir` must exist.
  explicit FileRendezvousStore(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  std::string PathOf(const std::string& key) const;

  const std::string dir_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_TESTS_WORKER_COMM_COMM_FILE_STORE_H_
