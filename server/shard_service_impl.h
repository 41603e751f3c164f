// The zeroshard.v1.ShardService implementation on gRPC's callback API.
//
// Gather and PushGrad use the raw (ByteBuffer) callback methods so that
// Gather replies are encoded with one copy of the payload and PushGrad
// pieces are applied from the received slices; SetWeights so that a piece
// that does not parse fails the call (the generated reader would end the
// stream there, as if the client had half-closed). Every other method uses
// the generated message types. Handlers validate, act on the ModelShard (absent
// until Init: FAILED_PRECONDITION), count calls, bytes and errors, and
// convert absl::Status to grpc::Status once, at the edge. Every handler first
// authorizes the caller (server/authorizer.h): a refused call is counted by
// method and changes nothing.
//
//   ShardServiceImpl service({.identity = {0, 2}, .placement = kHost});
//   builder.RegisterService(&service);
#ifndef ZEROSHARD_SERVER_SHARD_SERVICE_IMPL_H_
#define ZEROSHARD_SERVER_SHARD_SERVICE_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "server/authorizer.h"
#include "server/idle_streams.h"
#include "server/kv_store.h"
#include "server/placement.h"
#include "server/rpc_counters.h"
#include "server/model_shard.h"

namespace zeroshard {

using ShardServiceBase = v1::ShardService::WithRawCallbackMethod_Gather<
    v1::ShardService::WithRawCallbackMethod_PushGrad<
        v1::ShardService::WithRawCallbackMethod_SetWeights<
            v1::ShardService::CallbackService>>>;

class ShardServiceImpl final : public ShardServiceBase {
 public:
  struct Config {
    ServerIdentity identity;
    Placement placement = Placement::kHost;
    // Null: open (every caller is admin; tests only).
    std::shared_ptr<Authorizer> authorizer;
    // Cap on gradient bytes buffered awaiting commits; 0: the store's
    // default (ShardStore::DefaultPendingGradLimit).
    uint64_t max_pending_grad_bytes = 0;
    // Idle PushGrad streams are failed after this (IdleStreams); infinite:
    // never.
    absl::Duration push_idle_timeout = absl::Seconds(60);
  };
  explicit ShardServiceImpl(Config config);

  grpc::ServerUnaryReactor* Init(grpc::CallbackServerContext* context,
                                 const v1::InitRequest* request,
                                 v1::InitResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Gather(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushGrad(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ApplyStep(grpc::CallbackServerContext* context,
                                      const v1::ApplyStepRequest* request,
                                      v1::ApplyStepResponse* response) override;
  grpc::ServerUnaryReactor* Inspect(grpc::CallbackServerContext* context,
                                    const v1::InspectRequest* request,
                                    v1::InspectResponse* response) override;
  grpc::ServerUnaryReactor* Checkpoint(
      grpc::CallbackServerContext* context,
      const v1::CheckpointRequest* request,
      v1::CheckpointResponse* response) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context,
                                    const v1::RestoreRequest* request,
                                    v1::RestoreResponse* response) override;
  grpc::ServerWriteReactor<v1::GatherChunk>* ReadSnapshot(
      grpc::CallbackServerContext* context,
      const v1::ReadSnapshotRequest* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* SetWeights(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const v1::KvSetRequest* request,
                                  v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* context,
                                   const v1::KvWaitRequest* request,
                                   v1::KvWaitResponse* response) override;

  // Counts the call of `method` and authorizes its caller: OK, or the
  // UNAUTHENTICATED / PERMISSION_DENIED refusal (counted).
  absl::Status Admit(grpc::CallbackServerContext* context,
                     absl::string_view method);
  // The state after Init; FAILED_PRECONDITION before.
  absl::StatusOr<std::shared_ptr<ModelShard>> state() const;
  RpcCounters& counters() { return counters_; }

 private:
  absl::Status DoInit(const v1::InitRequest& request,
                      v1::InitResponse* response);
  absl::Status DoInspect(v1::InspectResponse* response);
  // The KV scope of a call: INVALID_ARGUMENT for a bad run id,
  // PERMISSION_DENIED for another run than the initialised server's.
  absl::StatusOr<KvScope> KvScopeOf(const std::string& run_id,
                                    uint64_t attempt) const;
  // Finishes a unary call with `status`, counting an error.
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                        const absl::Status& status);

  const Config config_;
  RpcCounters counters_;
  KvStore kv_;
  IdleStreams push_streams_;
  absl::Mutex init_mu_;  // serialises Init
  mutable absl::Mutex mu_;
  std::shared_ptr<ModelShard> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SERVICE_IMPL_H_
