// The client of a zeroshard cluster: routes flat ranges to the shard servers
// that own them (common/layout.h), one parallel stream per server per call,
// with per-call deadlines, UNAVAILABLE retried with backoff, and bounded
// bytes in flight. Payload bytes are sent from and received into the
// caller's buffers without intermediate copies.
//
//   ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, 2, 1));
//   ASSIGN_OR_RETURN(auto client, ShardClient::Create(
//       {"127.0.0.1:5000", "127.0.0.1:5001"}, layout));
//   RETURN_IF_ERROR(client->Init(InitOptions{.seed = 1}).status());
//   std::vector<uint16_t> w(layout.total_elems());
//   ASSIGN_OR_RETURN(GatherResult g, client->Gather(
//       {{FlatRange{0, layout.total_elems()}}}, DType::kBf16, 0, w.data(),
//       w.size() * 2));
//   ASSIGN_OR_RETURN(PushResult p, client->PushGrad(
//       0, /*worker=*/0, {{range, DType::kFp32, grads}}, StepCommit{1.0},
//       /*coefficient_known=*/false));
//
// Errors: absl::Status with the server's code and its address in the
// message. UNAVAILABLE comes back only after the retry policy gave up;
// ABORTED (stale/future step), INVALID_ARGUMENT and FAILED_PRECONDITION are
// never retried. Thread-safe: calls may run concurrently from many threads;
// the client must outlive its PushSessions.
#ifndef ZEROSHARD_CLIENT_SHARD_CLIENT_H_
#define ZEROSHARD_CLIENT_SHARD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/call_canceller.h"
#include "client/gather_stream.h"
#include "client/init_options.h"
#include "client/push_session.h"
#include "client/server_status.h"
#include "client/shard_channels.h"
#include "common/dtype.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// The optimizer Init sends every server: options' config with its
// parameter groups over `layout`. INVALID_ARGUMENT as Init.
absl::StatusOr<v1::OptimizerConfig> InitOptimizer(const FlatLayout& layout,
                                                  const InitOptions& options);

class ShardClient {
 public:
  // `servers[k]` must be server k of layout.num_servers().
  static absl::StatusOr<std::unique_ptr<ShardClient>> Create(
      const std::vector<std::string>& servers, FlatLayout layout,
      ShardClientOptions options = ShardClientOptions());

  const FlatLayout& layout() const { return layout_; }
  const ShardChannels& channels() const { return *channels_; }
  int num_servers() const { return channels_->size(); }

  // Init on every server in parallel. Checks that each server's owned range
  // and total agree with the layout (FAILED_PRECONDITION otherwise).
  absl::StatusOr<std::vector<ServerInit>> Init(
      const InitOptions& options);
  // Init on server k alone (a replacement, before its copies are restored:
  // ShardCluster::ReviveServer).
  absl::Status InitServer(int k, const InitOptions& options);

  // Streams `ranges` (disjoint, inside [0, total)) in `dtype` (FP32 or BF16)
  // at chunk version >= min_version (negative: current) into `out`: the
  // ranges' elements concatenated in the order given; out_bytes must equal
  // their total size. Servers wait for the version under the call deadline.
  // With `cancel`, another thread can end the call early (CANCELLED).
  absl::StatusOr<GatherResult> Gather(absl::Span<const FlatRange> ranges,
                                      DType dtype, int64_t min_version,
                                      void* out, size_t out_bytes,
                                      CallCanceller* cancel = nullptr);

  // Opens a streaming push for (step, worker); see client/push_session.h.
  // With `known`, the coefficient and skip flag go in each stream's header
  // and pieces are applied as they arrive.
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

 private:
  // The Init request of every server but its index.
  absl::StatusOr<v1::InitRequest> InitRequestFor(
      const InitOptions& options) const;
  // Init on server k with `base` (its index set), checking the owned range.
  absl::Status InitOn(int k, const v1::InitRequest& base,
                      v1::InitResponse* response) const;

  ShardClient(FlatLayout layout, std::unique_ptr<ShardChannels> channels)
      : layout_(std::move(layout)), channels_(std::move(channels)) {}

  // Constant after construction.
  const FlatLayout layout_;
  const std::unique_ptr<ShardChannels> channels_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_SHARD_CLIENT_H_
