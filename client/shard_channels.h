// Connections to the shard servers of one cluster: one gRPC channel per
// server (its own TCP connection, tuned for large streams), the generated
// stubs, and the small per-server calls that need no layout: Inspect and the
// grpc.health.v1 Check. ShardClient builds on it; zeroshard-ctl uses it alone
// for `inspect` and `health`.
//
//   ASSIGN_OR_RETURN(auto channels, ShardChannels::Connect(
//       {"127.0.0.1:5000", "127.0.0.1:5001"}, ShardClientOptions()));
//   for (auto& r : channels->InspectAll()) ...
//
// Thread-safe: every method may be called from any thread.
#ifndef ZEROSHARD_CLIENT_SHARD_CHANNELS_H_
#define ZEROSHARD_CLIENT_SHARD_CHANNELS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client_options.h"
#include "client/retry_policy.h"
#include "client/server_region.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "wire/credentials.h"

namespace zeroshard {

// Runs `call` (one attempt, returning its status) under `policy`: UNAVAILABLE
// is retried after a backoff, anything else returned at once. With the
// call's `channel`, the backoff is spent driving its reconnection (gRPC's
// sync API otherwise polls a failed channel only every 5 s, so a server back
// within the retries would still be missed).
absl::Status RunWithRetry(const RetryPolicy& policy,
                          const std::function<absl::Status()>& call,
                          grpc::Channel* channel = nullptr);

class ShardChannels {
 public:
  // Validates the addresses (non-empty HOST:PORT) and creates the channels;
  // connecting happens lazily on the first call.
  static absl::StatusOr<std::unique_ptr<ShardChannels>> Connect(
      const std::vector<std::string>& servers, ShardClientOptions options);

  int size() const { return static_cast<int>(addresses_.size()); }
  const std::string& address(int k) const { return addresses_[k]; }
  const ShardClientOptions& options() const { return options_; }
  const std::shared_ptr<grpc::Channel>& channel(int k) const {
    return channels_[k];
  }
  v1::ShardService::Stub& stub(int k) const { return *stubs_[k]; }

  // Inspect on server k (with retries).
  absl::StatusOr<v1::InspectResponse> Inspect(int k) const;
  // Inspect on every server, in parallel; one result per server.
  std::vector<absl::StatusOr<v1::InspectResponse>> InspectAll() const;
  // grpc.health.v1 Check("") on server k: "SERVING", "NOT_SERVING", ... or
  // the error of the call.
  absl::StatusOr<std::string> Health(int k) const;
  std::vector<absl::StatusOr<std::string>> HealthAll() const;
  // Waits until server k's channel is connected or `deadline` passes; true
  // when connected. The waiting thread drives the connection attempts
  // (gRPC's sync API otherwise polls a failed channel only every 5 s), so a
  // restarted server is found within the reconnect backoff (<= 1 s).
  bool WaitForConnected(int k, absl::Time deadline) const;

  // A ClientContext with the control deadline set.
  void PrepareControlContext(grpc::ClientContext* ctx) const;

  // The shared-memory region with server k (client/server_region.h), or
  // null: Gather and PushGrad then go over gRPC alone.
  std::shared_ptr<const ServerRegion> region(int k) const;
  // Installs server k's region; null closes the one installed (calls still
  // using it keep it mapped until they end).
  void SetRegion(int k, std::shared_ptr<const ServerRegion> region);
  // Closes every installed region on its server.
  ~ShardChannels();

 private:
  ShardChannels() = default;

  // Constant after construction.
  ShardClientOptions options_;
  std::vector<std::string> addresses_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::ShardService::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health_stubs_;
  mutable absl::Mutex regions_mu_;
  std::vector<std::shared_ptr<const ServerRegion>> regions_
      ABSL_GUARDED_BY(regions_mu_);
};

// Runs call(i) for i in [0, n) in parallel (a thread each), e.g. one call
// per server; the first error in index order, or OK.
absl::Status RunInParallel(int n, const std::function<absl::Status(int)>& call);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SHARD_CHANNELS_H_
