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

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/call_canceller.h"
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
  // Inspect of slot `slot`'s copy on server k (with retries); with
  // `digest`, its state's digest too (InspectRequest.state_digest).
  absl::StatusOr<v1::InspectResponse> InspectCopy(int slot, int k,
                                                  bool digest = false) const;
  // With replicas 2: every live copy of every slot hashes its state, and
  // two copies of a slot that stand at different versions or hash
  // differently are DATA_LOSS, naming the slot, its flat range and both
  // servers (a copy that diverged is worse than none). Call it between
  // steps, while no step is being applied. OK with one copy.
  absl::Status CheckCopiesAgree() const;
  // With replicas 2, for a client that comes to a running cluster (the
  // launcher's export of the final weights, a tool): a copy that is not
  // initialised, or stands at an older step than its twin (a server the
  // workers left and have not restored), is marked down, so that reads go
  // to the current copy. Call it while no step is being applied. OK with
  // one copy.
  absl::Status LeaveStaleCopies() const;
  // Inspect of slot `slot` from its first live copy (OnOneCopy).
  absl::StatusOr<v1::InspectResponse> InspectSlot(int slot) const;
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

  // Replicas (options().replicas; docs/DESIGN.md, "Replicas"). Slot k is
  // the flat range layout.ServerRange(k); its copies are on server k and,
  // with 2 replicas, on server k + 1 mod S.
  int replicas() const { return options_.replicas; }
  // The copies of slot k not marked down, server k first.
  std::vector<int> LiveHolders(int slot) const;
  // True once server k was marked down.
  bool IsDown(int k) const { return down_[k]->load(); }
  // Marks server k down (with replicas 2 only; logs `why` once): calls
  // leave it until MarkUp, a comparison's Inspect in flight to it is
  // cancelled, and its shared-memory region is dropped (not closed: its
  // server is gone).
  void MarkDown(int k, const absl::Status& why) const;
  // Server k holds its copies again (a replacement restored at a step
  // boundary: ShardCluster::ReviveServer); calls reach it from now on.
  void MarkUp(int k) const;
  // Servers marked down.
  std::vector<int> DownServers() const;
  // The calls to server k that end when it is marked down register here
  // (a push stream, ApplyStep, Gather, Checkpoint, a comparison's Inspect).
  // Null with one copy: no server is ever left, so no call registers.
  CallCanceller* leaving(int k) const {
    return replicas() > 1 ? leaving_[k].get() : nullptr;
  }
  // Whether server k answers one grpc.health.v1 Check within `within` (any
  // answer of its own, an error included, is an answer); an error other
  // than the transport's UNAVAILABLE or DEADLINE_EXCEEDED is returned.
  absl::StatusOr<bool> Answers(int k, absl::Duration within) const;
  // Whether server k does not answer within options().silence_probe while
  // some other server not left does (an answer with an error counts): a
  // server hung or cut off, not this client cut off from all of them.
  bool SilentWhileOthersAnswer(int k) const;
  // Whether `s`, the status of a call on server k, ends that server's copies
  // (with replicas 2): CopyLost(s), or DEADLINE_EXCEEDED from a server
  // found SilentWhileOthersAnswer (a partition or a hung process: "no
  // answer within the step timeout").
  bool LostCopy(int k, const absl::Status& s) const;
  // Names `slot` in the call's metadata when it goes to a server other than
  // the slot's own, and with replicas 2 says that this client writes both
  // copies (wire/slot_metadata.h): a server keeping two copies refuses
  // writes from a client that would write one.
  void RouteTo(grpc::ClientContext* ctx, int slot, int server) const;
  // Runs call(server) on every live copy of `slot`, in parallel. With replicas
  // 2, a copy whose call ends so that LostCopy says it is lost (its server
  // gone or silent) is marked down and left out, so the result is OK when
  // at least one copy succeeded and every other one was lost; otherwise the
  // first error. With one copy, the call's own status.
  absl::Status OnEveryCopy(int slot,
                           const std::function<absl::Status(int)>& call) const;
  // One call's outcome on one copy of a slot.
  struct CopyResult {
    int server = 0;
    absl::Status status;
  };
  // The outcome of one call on each copy of `slot`, by OnEveryCopy's rule:
  // OK when a copy succeeded and every other was lost (marked down, unless
  // `mark_down` is false), else the first other error, or UNAVAILABLE
  // "every copy of slot k is gone"; with one copy, its own status.
  absl::Status SettleCopies(int slot, absl::Span<const CopyResult> results,
                            bool mark_down = true) const;
  // Runs call(server) on the first live copy of `slot`; with replicas 2, a
  // copy lost as above is marked down and the next one tried.
  absl::Status OnOneCopy(int slot,
                         const std::function<absl::Status(int)>& call) const;

  // The shared-memory region with server k (client/server_region.h), or
  // null: Gather and PushGrad then go over gRPC alone.
  std::shared_ptr<const ServerRegion> region(int k) const;
  // Installs server k's region; null closes the one installed (calls still
  // using it keep it mapped until they end).
  void SetRegion(int k, std::shared_ptr<const ServerRegion> region);
  // The ids of the regions MarkDown dropped on server k without closing
  // them (it did not answer), once: closed by the caller when the server
  // answers again (a woken server still holds them; a replacement never
  // had them).
  std::vector<uint64_t> TakeStaleRegions(int k) const;
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
  // Per server: marked down (MarkDown).
  std::vector<std::unique_ptr<std::atomic<bool>>> down_;
  // Per server: a probe after a DEADLINE_EXCEEDED went unanswered
  // (LostCopy; a push stream's error is looked at during backward and again
  // at its reply, before any MarkDown); cleared by MarkUp.
  std::vector<std::unique_ptr<std::atomic<bool>>> silent_;
  // Per server: the calls that end when it is marked down (pushes,
  // ApplyStep, Gather, Checkpoint, a comparison's Inspect); cancelled by
  // MarkDown, re-armed by MarkUp; watched by WatchForSilence.
  std::vector<std::unique_ptr<CallCanceller>> leaving_;
  // One live copy of a slot and its server's Inspect of it.
  struct LiveCopy {
    int server = 0;
    v1::InspectResponse r;
  };
  // Inspect (with the state digest, if asked) of every live copy of
  // `slot`; a copy lost (LostCopy) or not initialised is marked down and
  // left out; any other error is returned.
  absl::StatusOr<std::vector<LiveCopy>> InspectLiveCopies(int slot,
                                                          bool digest) const;
  // The watch over silent servers (replicas 2 only), stopped and joined by
  // the destructor.
  void WatchForSilence();
  // Whether both slots server k holds have a live copy elsewhere.
  bool OthersHoldItsSlots(int k) const;
  absl::Mutex watch_mu_;
  bool watch_stop_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread watch_;
  mutable absl::Mutex regions_mu_;
  mutable std::vector<std::shared_ptr<const ServerRegion>> regions_
      ABSL_GUARDED_BY(regions_mu_);
  mutable std::vector<std::vector<uint64_t>> stale_regions_
      ABSL_GUARDED_BY(regions_mu_);
};

// What ends a copy of a slot by the status alone, with replicas 2: its
// server does not answer (UNAVAILABLE once the transport's retries are
// spent), or answers that it is not initialised (a process started in its
// place). ShardChannels::LostCopy adds a silent server's DEADLINE_EXCEEDED.
bool CopyLost(const absl::Status& s);

// Runs call(i) for i in [0, n) in parallel (a thread each), e.g. one call
// per server; the first error in index order, or OK.
absl::Status RunInParallel(int n, const std::function<absl::Status(int)>& call);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SHARD_CHANNELS_H_
