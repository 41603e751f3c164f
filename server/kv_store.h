// The shard server's rendezvous key-value store (KvSet / KvGet / KvWait).
//
// Keys belong to a run and one attempt of it (KvScope; the contract is the
// comment above KvSetRequest in proto/zeroshard/v1/shard.proto):
//  - a call naming a newer attempt of a run drops every key of the run's
//    older attempts and fails their waiters with ABORTED, so a failed
//    attempt's rendezvous keys can never be read by its successor;
//  - a call naming an older attempt than the newest seen is ABORTED;
//  - run ids are 1..kMaxRunIdBytes printable ASCII (INVALID_ARGUMENT).
// Limits (Limits below) answer RESOURCE_EXHAUSTED naming the limit: keys per
// run, bytes per value, bytes (keys + values) per run, and runs held.
// Keys are 1..kMaxKeyBytes bytes; a wait names at most kMaxWaitKeys keys.
//
// Waiting never blocks a thread: WaitForKeys registers a callback that the
// Set completing the set of keys calls with OK (outside the lock), or that a
// newer attempt or RetainOnlyRun calls with the reason it can never succeed;
// the RPC layer cancels it when the call's deadline passes.
//
//   KvScope scope{"train-42", 1};
//   absl::StatusOr<uint64_t> id =
//       kv.WaitForKeys(scope, {"gloo/0", "gloo/1"}, [](absl::Status s) {...});
//   if (id.ok() && *id == 0) { /* all present already */ }
//   RETURN_IF_ERROR(kv.Set(scope, "gloo/0", address));
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_KV_STORE_H_
#define ZEROSHARD_SERVER_KV_STORE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

// Whose keys a call reads or writes.
struct KvScope {
  std::string run_id;
  uint64_t attempt = 0;
};

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxRunIdBytes = 128;
  static constexpr size_t kMaxWaitKeys = 4096;

  struct Limits {
    size_t max_keys_per_run = 4096;
    size_t max_value_bytes = size_t{1} << 20;
    size_t max_bytes_per_run = size_t{16} << 20;  // keys + values
    size_t max_runs = 16;
  };

  KvStore() : KvStore(Limits()) {}
  explicit KvStore(Limits limits) : limits_(limits) {}
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  const Limits& limits() const { return limits_; }

  // INVALID_ARGUMENT unless 1..kMaxRunIdBytes printable ASCII characters.
  static absl::Status ValidateRunId(absl::string_view run_id);

  // Sets (overwrites) a key. INVALID_ARGUMENT for a bad run id or key;
  // ABORTED for an older attempt; RESOURCE_EXHAUSTED past a limit.
  absl::Status Set(const KvScope& scope, const std::string& key,
                   std::string value);
  // The value, or nullopt when absent; errors as Set's.
  absl::StatusOr<std::optional<std::string>> Get(const KvScope& scope,
                                                 const std::string& key);

  // INVALID_ARGUMENT for bad keys or too many of them.
  static absl::Status ValidateKeys(const std::vector<std::string>& keys);
  // Returns 0 when every key exists. Otherwise registers `wake`, called once
  // with OK when the last missing key is set, or with ABORTED /
  // PERMISSION_DENIED when the keys are dropped, and returns its id (never
  // 0). Keys must have passed ValidateKeys; errors as Set's.
  absl::StatusOr<uint64_t> WaitForKeys(const KvScope& scope,
                                       const std::vector<std::string>& keys,
                                       std::function<void(absl::Status)> wake);
  // Unregisters a waiter; false when it has already been called.
  bool CancelWait(uint64_t id);
  // The keys a waiter still misses (for error messages); empty if gone.
  std::vector<std::string> Missing(uint64_t id) const;

  // Drops every run but `run_id` (the server's, once initialised), failing
  // their waiters with PERMISSION_DENIED.
  void RetainOnlyRun(const std::string& run_id);

  // Keys and bytes held for a run (tests, Inspect); zeros if unknown.
  struct RunUsage {
    uint64_t attempt = 0;
    size_t keys = 0;
    size_t bytes = 0;
  };
  RunUsage Usage(const std::string& run_id) const;

 private:
  struct Waiter {
    std::string run_id;
    absl::flat_hash_set<std::string> missing;
    std::function<void(absl::Status)> wake;
  };
  struct Run {
    uint64_t attempt = 0;
    absl::flat_hash_map<std::string, std::string> values;
    size_t bytes = 0;  // keys + values
    absl::flat_hash_set<uint64_t> waiters;
  };
  using Wakes = std::vector<std::pair<std::function<void(absl::Status)>,
                                      absl::Status>>;

  // The scope's run, created or moved on to a newer attempt as needed (its
  // older attempt's waiters go to *wakes); errors as Set's.
  absl::StatusOr<Run*> Enter(const KvScope& scope, Wakes* wakes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the run's waiters, to be called with `status`.
  void FailWaiters(Run& run, const absl::Status& status, Wakes* wakes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Run> runs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_KV_STORE_H_
