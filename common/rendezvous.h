// A key-value store for rendezvous among workers (Gloo / NCCL bootstrap).
//
// The shard server serves one over gRPC (KvSet/KvGet/KvWait; the client is
// client/kv_client.h); InMemoryRendezvousStore serves tests in one process.
// Every wait is bounded by a timeout.
//
//   store.Set("gloo/0", addr);
//   ASSIGN_OR_RETURN(std::string peer, store.Get("gloo/1", absl::Seconds(30)));
#ifndef ZEROSHARD_COMMON_RENDEZVOUS_H_
#define ZEROSHARD_COMMON_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zeroshard {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Sets (overwrites) a key.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists, up to `timeout`, and returns its value;
  // DEADLINE_EXCEEDED naming the key otherwise.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          absl::Duration timeout) = 0;
  // Waits until every key exists, up to `timeout`.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;
};

// Thread-safe, process-local.
class InMemoryRendezvousStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_RENDEZVOUS_H_
