// ShardCluster: the client library's public face. One object per cluster of
// shard servers; everything a worker, a tool or a language binding does
// with the servers goes through it, in the project's own types (no wire
// message crosses it). docs/DESIGN.md, "The client library".
//
//   ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, 2, 1));
//   ASSIGN_OR_RETURN(auto cluster, ShardCluster::Connect(
//       {"127.0.0.1:5000", "127.0.0.1:5001"}, ShardClientOptions(), layout));
//   RETURN_IF_ERROR(cluster->Init(InitOptions{.seed = 1}).status());
//   std::vector<uint16_t> w(layout.total_elems());
//   ASSIGN_OR_RETURN(GatherResult g, cluster->Gather(
//       {{FlatRange{0, layout.total_elems()}}}, DType::kBf16, 0, w.data(),
//       w.size() * 2));
//   ASSIGN_OR_RETURN(PushResult p, cluster->PushGrad(
//       0, /*worker=*/0, {{range, DType::kFp32, grads}}, StepCommit{1.0},
//       /*coefficient_known=*/false));
//
// A cluster connected without a layout (a tool that learns the model from
// the servers) serves the calls that need none: Inspect, Health, Discover,
// the checkpoint and snapshot calls, restores and the key-value store; the
// others answer FAILED_PRECONDITION.
//
// Errors: absl::Status with the server's code and its address in the
// message; UNAVAILABLE only after the retry policy gave up. Thread-safe:
// calls may run concurrently; the cluster must outlive its PushSessions.
#ifndef ZEROSHARD_CLIENT_SHARD_CLUSTER_H_
#define ZEROSHARD_CLIENT_SHARD_CLUSTER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/call_canceller.h"
#include "client/checkpoint_commit.h"
#include "client/client_options.h"
#include "client/gather_result.h"
#include "client/init_options.h"
#include "client/kv_client.h"
#include "client/push_session.h"
#include "client/server_status.h"
#include "client/snapshot.h"
#include "common/dtype.h"
#include "common/layout.h"

namespace zeroshard {

class ShardChannels;
class ShardClient;

class ShardCluster {
 public:
  // Validates the addresses (non-empty HOST:PORT; `servers[k]` is server k)
  // and creates the channels; connecting happens on the first call. With
  // `layout`, its server count must be servers.size().
  static absl::StatusOr<std::unique_ptr<ShardCluster>> Connect(
      const std::vector<std::string>& servers,
      ShardClientOptions options = ShardClientOptions(),
      std::optional<FlatLayout> layout = std::nullopt);
  ~ShardCluster();
  ShardCluster(const ShardCluster&) = delete;
  ShardCluster& operator=(const ShardCluster&) = delete;

  int num_servers() const;
  const std::string& address(int k) const;
  const std::vector<std::string>& addresses() const { return addresses_; }
  const ShardClientOptions& options() const;
  bool has_layout() const { return client_ != nullptr; }
  // Requires has_layout().
  const FlatLayout& layout() const;

  // --- What the servers report (no layout needed) ---------------------------
  absl::StatusOr<ServerStatus> Inspect(int k) const;
  // With replicas: what server k reports of its copy of slot `slot`
  // (docs/DESIGN.md, "Replicas"); Inspect(k) is InspectCopy(k, k).
  absl::StatusOr<ServerStatus> InspectCopy(int slot, int k) const;
  // With replicas: true once this client found server k gone (its slots go
  // on from their other copies; ShardClientOptions::replicas).
  bool ServerGone(int k) const;
  // With replicas: leaves server k as if this client had found it gone
  // (a peer rank did; `why` is logged once).
  void LeaveServer(int k, const absl::Status& why) const;
  // With replicas: the copies of every slot agree bit for bit (their state
  // digests at one version); DATA_LOSS naming the slot and both servers
  // otherwise. Between steps only (ShardChannels::CheckCopiesAgree).
  absl::Status CheckCopiesAgree() const;
  // With replicas: copies not initialised or behind their twin are left,
  // for a client new to a running cluster (ShardChannels::LeaveStaleCopies).
  absl::Status LeaveStaleCopies() const;
  // With replicas: the servers this client left (their copies lost), and
  // whether server k answers again, within `timeout`, one try: a
  // replacement started at its address (no state), or the server itself
  // back from a partition (its state, which this client stopped writing, is
  // not trusted). Either way ReviveServer makes its copies the
  // checkpoint's.
  std::vector<int> GoneServers() const;
  absl::StatusOr<bool> AnswersAgain(int k, absl::Duration timeout) const;
  // Server k, answering again, takes back both its copies (its own slot and
  // the one before it), between steps, while nothing is applied: Init with
  // `options` replacing whatever model it held, then each copy restored
  // from `directory`'s checkpoint of `step` (the step every slot stands
  // at), then calls reach it again. The other ranks' clients learn it
  // through MarkServerBack.
  absl::Status ReviveServer(int k, const InitOptions& options,
                            const std::string& directory, uint64_t step);
  // ReviveServer without the last part: server k's copies are restored, and
  // this client still leaves it (a catch-up goes on from here).
  absl::Status RestoreServer(int k, const InitOptions& options,
                             const std::string& directory, uint64_t step);
  // Catching server k up while training goes on (client/catch_up.h): the
  // other copies of its slots log their pushes from `from_step`; k applies
  // what they logged since its version (the lower of its two copies'
  // versions afterwards); the logs are dropped.
  absl::Status OpenStepLogs(int k, uint64_t from_step) const;
  absl::StatusOr<uint64_t> ReplayStepLogs(int k) const;
  void CloseStepLogs(int k) const;
  // This client reaches server k again (another process revived it).
  void MarkServerBack(int k) const;
  // One result per server, asked in parallel.
  std::vector<absl::StatusOr<ServerStatus>> InspectAll() const;
  // grpc.health.v1 Check: "SERVING", "NOT_SERVING", ... per server.
  absl::StatusOr<std::string> Health(int k) const;
  std::vector<absl::StatusOr<std::string>> HealthAll() const;
  // Until server k's channel connects (true) or `deadline` passes (false);
  // see ShardChannels::WaitForConnected.
  bool WaitForConnected(int k, absl::Time deadline) const;
  // Every server answers, is initialised, agrees on the count and the model,
  // and owns what the layout it implies assigns it (FAILED_PRECONDITION
  // naming the server otherwise).
  absl::StatusOr<ClusterView> Discover() const;

  // --- Training (needs the layout) ------------------------------------------
  // Init on every server in parallel; checks each one's owned range and
  // total against the layout.
  absl::StatusOr<std::vector<ServerInit>> Init(const InitOptions& options);
  // Streams `ranges` (disjoint, inside [0, total)) in `dtype` (FP32 or BF16)
  // at chunk version >= min_version (negative: current) into `out`: the
  // ranges' elements concatenated in order; out_bytes must equal their size.
  absl::StatusOr<GatherResult> Gather(absl::Span<const FlatRange> ranges,
                                      DType dtype, int64_t min_version,
                                      void* out, size_t out_bytes,
                                      CallCanceller* cancel = nullptr);
  // A streaming push for (step, worker) (client/push_session.h). With
  // `known`, the coefficient goes in each stream's header and pieces are
  // applied as they arrive.
  absl::StatusOr<std::unique_ptr<PushSession>> OpenPush(
      uint64_t step, uint32_t worker,
      std::optional<StepCommit> known = std::nullopt);
  // One-shot push of `grads` (disjoint ranges): OpenPush + Add + Commit.
  absl::StatusOr<PushResult> PushGrad(uint64_t step, uint32_t worker,
                                      absl::Span<const GradSpan> grads,
                                      const StepCommit& commit,
                                      bool coefficient_known);

  // Shared memory with the servers on this host (docs/DESIGN.md, "Shared
  // memory on one host"): opens a region on each server owning part of
  // `ranges` (what this client pushes and gathers at a time: each server's
  // region holds its part of them in FP32 twice, once for a push and once
  // for a gather) and maps it, so that Gather and PushGrad move their
  // elements through it and send only small messages over gRPC; a call that
  // does not fit, or that finds the region in use, goes over gRPC. A server
  // whose region cannot be mapped here (another host, another pid
  // namespace, another user, or its limits reached) stays on gRPC; `why`,
  // when given, receives the first such reason. Returns how many servers
  // use shared memory. Call it with no Gather or push in flight.
  absl::StatusOr<int> AttachSharedMemory(absl::Span<const FlatRange> ranges,
                                         std::string* why = nullptr);
  // Closes the regions; every call goes over gRPC again.
  void DetachSharedMemory();
  // Replaces the master weights (all of [0, total), FP32) of initialised
  // servers; m, v and the step counts stay (client/set_weights.h).
  absl::Status SetMasterWeights(absl::Span<const float> flat);
  // The same for some ranges of the flat space only (ascending, disjoint);
  // `values` holds their elements concatenated. The rest keeps its values.
  absl::Status SetMasterWeightRanges(absl::Span<const FlatRange> ranges,
                                     absl::Span<const float> values);
  // The same for any array: "" (the masters) or an FP32 state slot, and
  // the Adam step count with it (client/set_weights.h SetStateRanges).
  absl::Status SetStateRanges(absl::Span<const FlatRange> ranges,
                              absl::Span<const float> values,
                              const std::string& state,
                              std::optional<uint64_t> optimizer_step);

  // --- Two-phase steps (no layout needed) -----------------------------------
  // Applies the prepared pushes of (step, attempt) on every server in
  // parallel; a server that applied already answers OK. The sums.
  absl::StatusOr<PushResult> ApplyStep(uint64_t step, uint64_t attempt,
                                       absl::Duration timeout) const;
  // The same on server k alone (a sender that dies half way).
  absl::Status ApplyStepOn(int k, uint64_t step, uint64_t attempt,
                           absl::Duration timeout) const;

  // --- Checkpoints and snapshots (no layout needed) -------------------------
  // Arms a copy of version `step` on every server into `directory`
  // (FAILED_PRECONDITION when one is already past it).
  absl::Status ArmCheckpoint(uint64_t step, const std::string& directory) const;
  // Waits (each call under `timeout`) until every server's file of `step` is
  // written; commit them with CommitCheckpoint (client/checkpoint_commit.h).
  absl::StatusOr<std::vector<ShardFile>> WaitCheckpoint(
      uint64_t step, const std::string& directory,
      absl::Duration timeout) const;
  // Restores every server from the checkpoint of `step` (newest when unset);
  // they all end at one version or the call fails.
  absl::StatusOr<std::vector<ServerRestore>> Restore(
      const std::string& directory, std::optional<uint64_t> step,
      absl::Duration timeout) const;
  // Arms a snapshot in `directory` ("" in memory) at one step on `servers`
  // (indices) and waits for each copy: `step` when given, else the servers'
  // highest version, retried past training up to options.max_tries times.
  absl::StatusOr<ArmedSnapshot> SnapshotAtOneStep(
      const std::vector<int>& servers, const std::string& directory,
      std::optional<uint64_t> step, const SnapshotReadOptions& options) const;
  // A consistent copy of `range` (inside [0, layout.total)) of the named
  // arrays ("master" or state slots) at one step, read while training runs.
  absl::StatusOr<ConsistentSnapshot> ReadConsistentSnapshot(
      const FlatLayout& layout, FlatRange range,
      const std::vector<std::string>& arrays,
      const SnapshotReadOptions& options) const;

  // --- Key-value store (rendezvous) ------------------------------------------
  // A client of the key-value store naming `scope` (run, attempt): on
  // server k, and with replicas on the next server too (KvClient).
  absl::StatusOr<std::unique_ptr<KvClient>> OpenKv(
      KvClient::Scope scope, int k = 0) const;

 private:
  ShardCluster(std::vector<std::string> addresses,
               std::unique_ptr<ShardChannels> channels,
               std::unique_ptr<ShardClient> client);
  absl::Status NeedLayout(const char* call) const;

  // Constant after construction.
  const ShardChannels& channels() const;

  const std::vector<std::string> addresses_;
  // Exactly one is set: the client (which owns its channels) with a layout,
  // the channels alone without.
  const std::unique_ptr<ShardChannels> channels_;
  const std::unique_ptr<ShardClient> client_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SHARD_CLUSTER_H_
