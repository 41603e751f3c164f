// GlooRendezvousStore: Gloo's rendezvous::Store over zeroshard's
// RendezvousStore (common/rendezvous.h).
//
// Gloo exchanges each rank's TCP addresses through a key-value store. This
// adapter puts those keys under a prefix ("zs/comm/<group>/") in the
// zeroshard store (the shard server's KV RPC, or InMemoryRendezvousStore in
// tests) and bounds every wait by a timeout. Gloo's Store interface reports
// failure by exception, so failures are thrown as RendezvousFailure, which
// carries the absl::Status; GlooWorkerGroup catches it at its boundary.
//
//   GlooRendezvousStore gloo_store(&kv, "zs/comm/run7/workers/", absl::Seconds(30));
//   context->connectFullMesh(gloo_store, device);  // may throw RendezvousFailure
//
// Gloo's full-mesh rendezvous names its keys after the ranks ("0", "1", ...);
// a wait that times out names the ranks whose keys are missing.
#ifndef ZEROSHARD_WORKER_COMM_GLOO_STORE_H_
#define ZEROSHARD_WORKER_COMM_GLOO_STORE_H_

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/rendezvous.h"

namespace zeroshard {

// Thrown through Gloo's code when the zeroshard store fails.
class RendezvousFailure : public std::runtime_error {
 public:
  explicit RendezvousFailure(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

class GlooRendezvousStore : public gloo::rendezvous::Store {
 public:
  // `store` must outlive this object. `group` is only used in messages.
  GlooRendezvousStore(RendezvousStore* store, std::string prefix,
                      std::string group, absl::Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  void WaitFor(const std::vector<std::string>& keys, absl::Duration timeout);

  RendezvousStore* const store_;
  const std::string prefix_;
  const std::string group_;
  const absl::Duration timeout_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMM_GLOO_STORE_H_
