// The ReadSnapshot call: streams FP32 values of a complete in-memory
// snapshot (ModelShard::ArmSnapshot with directory "") as GatherChunks.
//
// PlanReadSnapshot validates first: the snapshot of `step` must exist and be
// complete (NOT_FOUND naming the step otherwise), every range must lie inside
// the owned range (INVALID_ARGUMENT), the array must be master or a state
// slot of the shard's optimizer rule. The reactor then writes the ranges in request order, one
// message of at most 1 MiB of data at a time, each hand-encoded into one
// slice (wire/gather_codec.h, on the raw callback API like Gather), so each
// payload byte is copied once; the snapshot is held (shared)
// until the call is done, so its arrays stay valid even if the shard drops
// it meanwhile.
//
//   ASSIGN_OR_RETURN(ReadSnapshotPlan plan, PlanReadSnapshot(shard, request));
//   return new ReadSnapshotReactor(std::move(plan), &counters);
#ifndef ZEROSHARD_SERVER_READ_SNAPSHOT_REACTOR_H_
#define ZEROSHARD_SERVER_READ_SNAPSHOT_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/status_reactor.h"
#include "server/model_shard.h"
#include "server/rpc_counters.h"
#include "server/shard_snapshot.h"

namespace zeroshard {

// Elements of FP32 data per ReadSnapshot message (1 MiB).
inline constexpr uint64_t kReadSnapshotMessageElems = (1 << 20) / 4;

struct ReadSnapshotPlan {
  std::shared_ptr<ShardSnapshot> snapshot;  // complete
  FlatRange owned;
  size_t array = 0;  // 0 master, 1 + k the rule's slot k
  std::vector<FlatRange> ranges;
};

absl::StatusOr<ReadSnapshotPlan> PlanReadSnapshot(
    const ModelShard& shard, const v1::ReadSnapshotRequest& request);

class ReadSnapshotReactor
    : public StatusReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  // Starts writing at once.
  ReadSnapshotReactor(ReadSnapshotPlan plan, RpcCounters* counters);

  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  // Writes the next message or finishes. Only one write is in flight, so
  // the state below is touched by one callback at a time.
  void Next();

  const ReadSnapshotPlan plan_;
  RpcCounters* const counters_;
  size_t range_index_ = 0;
  uint64_t pos_ = 0;
  grpc::ByteBuffer buffer_;  // the message being written
  std::vector<float> values_;  // its values, before encoding
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_READ_SNAPSHOT_REACTOR_H_
