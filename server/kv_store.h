// The shard server's rendezvous key-value store (KvSet / KvGet / KvWait).
//
// Keys are 1..kMaxKeyBytes bytes, values at most kMaxValueBytes, at most
// kMaxKeys keys. Waiting never blocks a thread: WaitForKeys registers a
// callback that the Set completing the set of keys calls (outside the lock);
// the RPC layer cancels it when the call's deadline passes.
//
//   uint64_t id = kv.WaitForKeys({"gloo/0", "gloo/1"}, [] { ... });
//   if (id == 0) { /* all present already */ }
//   RETURN_IF_ERROR(kv.Set("gloo/0", address));
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
#include "absl/synchronization/mutex.h"

namespace zeroshard {

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = size_t{1} << 20;
  static constexpr size_t kMaxKeys = 1 << 16;
  static constexpr size_t kMaxWaitKeys = 4096;

  // Sets (overwrites) a key. INVALID_ARGUMENT for a bad key or value size;
  // RESOURCE_EXHAUSTED when a new key would exceed kMaxKeys.
  absl::Status Set(const std::string& key, std::string value);
  // The value, or nullopt when absent; INVALID_ARGUMENT for a bad key.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) const;

  // INVALID_ARGUMENT for bad keys or too many of them.
  static absl::Status ValidateKeys(const std::vector<std::string>& keys);
  // Returns 0 when every key exists. Otherwise registers `wake`, called once
  // when the last missing key is set, and returns its id (never 0). Keys
  // must have passed ValidateKeys.
  uint64_t WaitForKeys(const std::vector<std::string>& keys,
                       std::function<void()> wake);
  // Unregisters a waiter; false when it has already been called.
  bool CancelWait(uint64_t id);
  // The keys a waiter still misses (for error messages); empty if gone.
  std::vector<std::string> Missing(uint64_t id) const;

 private:
  struct Waiter {
    absl::flat_hash_set<std::string> missing;
    std::function<void()> wake;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_KV_STORE_H_
