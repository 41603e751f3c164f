// A scriptable in-process ShardService for client tests: serves Gather from a
// pure function of the offset, records what PushGrad received, keeps a tiny
// key-value store, and injects faults (UNAVAILABLE before or in the middle of
// a stream, ABORTED, a slow Gather) on request.
//
//   FakeShardCluster cluster(/*servers=*/2, layout);
//   cluster.server(1).fail_unavailable = 2;     // next 2 calls fail
//   auto client = ShardClient::Create(cluster.addresses(), layout, opts);
#ifndef ZEROSHARD_TESTS_CLIENT_FAKE_SHARD_SERVICE_H_
#define ZEROSHARD_TESTS_CLIENT_FAKE_SHARD_SERVICE_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "common/layout.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"

namespace zeroshard::testing {

// The FP32 value the fake serves at a flat offset.
float FakeValue(uint64_t offset);

struct ReceivedPush {
  v1::PushGradHeader header;
  std::vector<v1::PushGradPiece> pieces;
  bool committed = false;
  v1::PushGradCommit commit;
};

class FakeShardService final : public v1::ShardService::Service {
 public:
  FakeShardService(int index, FlatRange owned, uint64_t total)
      : index_(index), owned_(owned), total_(total) {}

  // Faults. Each counter is consumed by the calls it hits.
  std::atomic<int> fail_unavailable{0};       // Gather/PushGrad/Init/Inspect
  std::atomic<int> fail_push_midway{0};       // UNAVAILABLE after 2 pieces
  std::atomic<bool> abort_pushes{false};      // PushGrad -> ABORTED
  std::atomic<int> gather_delay_ms{0};        // before the first reply
  std::atomic<uint64_t> version{0};           // reported by Gather
  std::atomic<bool> misreport_range{false};   // Init answers a wrong range
  // Gather: the first piece sent twice in place of the last (right count,
  // a hole); or the first piece at an offset near 2^64 whose end wraps.
  std::atomic<bool> gather_duplicate{false};
  std::atomic<bool> gather_wrapping_offset{false};

  std::atomic<int> gather_calls{0};
  std::atomic<int> push_calls{0};
  std::atomic<int> init_calls{0};

  // Completed pushes (OK status), in order.
  std::vector<ReceivedPush> pushes() const;
  std::vector<v1::InitRequest> inits() const;

  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest* req,
                    v1::InitResponse* resp) override;
  grpc::Status Gather(grpc::ServerContext* ctx, const v1::GatherRequest* req,
                      grpc::ServerWriter<v1::GatherChunk>* writer) override;
  grpc::Status PushGrad(grpc::ServerContext* ctx,
                        grpc::ServerReader<v1::PushGradMessage>* reader,
                        v1::PushGradResponse* resp) override;
  grpc::Status Inspect(grpc::ServerContext*, const v1::InspectRequest*,
                       v1::InspectResponse* resp) override;
  grpc::Status KvSet(grpc::ServerContext*, const v1::KvSetRequest* req,
                     v1::KvSetResponse*) override;
  grpc::Status KvGet(grpc::ServerContext*, const v1::KvGetRequest* req,
                     v1::KvGetResponse* resp) override;
  grpc::Status KvWait(grpc::ServerContext* ctx, const v1::KvWaitRequest* req,
                      v1::KvWaitResponse*) override;

 private:
  bool TakeFault(std::atomic<int>& counter);

  const int index_;
  const FlatRange owned_;
  const uint64_t total_;
  mutable absl::Mutex mu_;
  std::vector<ReceivedPush> pushes_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::InitRequest> inits_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
};

// S fake servers on 127.0.0.1, port 0, owning the layout's ranges.
class FakeShardCluster {
 public:
  explicit FakeShardCluster(const FlatLayout& layout);
  ~FakeShardCluster();

  FakeShardService& server(int k) { return *services_[k]; }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::vector<std::unique_ptr<FakeShardService>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<std::string> addresses_;
};

// A 127.0.0.1 port that nothing listens on: bound and left bound, never
// listening, for the rest of the process.
int UnusedPort();

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_CLIENT_FAKE_SHARD_SERVICE_H_
