// The zeroshard.v1.ShardService implementation on gRPC's callback API.
//
// Every method is a raw (ByteBuffer) callback method: Gather and ReadSnapshot
// replies are encoded with one copy of the payload and PushGrad pieces are
// applied from the received slices; a SetWeights piece that does not parse
// fails the call (the generated reader would end the stream there, as if
// the client had half-closed); and a request that does not parse gets
// INVALID_ARGUMENT "<Method>: request does not parse" on every method
// (gRPC's generated deserialisation answers UNIMPLEMENTED with no message).
// The unary methods share one path (ServeUnary): authorize, parse, run the
// typed handler, serialise its reply as the call finishes
// (server/raw_messages.h). Handlers validate, act on the ModelShard (absent
// until Init: FAILED_PRECONDITION), count calls, bytes and errors, and
// convert absl::Status to grpc::Status once, at the edge. Every call first
// authorizes the caller (server/authorizer.h), before its request is even
// parsed: a refused call is counted by method and changes nothing.
//
//   ShardServiceImpl service({.identity = {0, 2}, .placement = kHost});
//   builder.RegisterService(&service);
#ifndef ZEROSHARD_SERVER_SHARD_SERVICE_IMPL_H_
#define ZEROSHARD_SERVER_SHARD_SERVICE_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
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
#include "server/raw_messages.h"
#include "server/rpc_counters.h"
#include "server/server_metrics.h"
#include "server/shared_regions.h"
#include "server/model_shard.h"

namespace zeroshard {

// clang-format off
using ShardServiceBase = v1::ShardService::WithRawCallbackMethod_Init<
    v1::ShardService::WithRawCallbackMethod_Gather<
    v1::ShardService::WithRawCallbackMethod_PushGrad<
    v1::ShardService::WithRawCallbackMethod_ApplyStep<
    v1::ShardService::WithRawCallbackMethod_Inspect<
    v1::ShardService::WithRawCallbackMethod_Checkpoint<
    v1::ShardService::WithRawCallbackMethod_Restore<
    v1::ShardService::WithRawCallbackMethod_ReadSnapshot<
    v1::ShardService::WithRawCallbackMethod_SetWeights<
    v1::ShardService::WithRawCallbackMethod_KvSet<
    v1::ShardService::WithRawCallbackMethod_KvGet<
    v1::ShardService::WithRawCallbackMethod_KvWait<
    v1::ShardService::WithRawCallbackMethod_OpenRegion<
    v1::ShardService::WithRawCallbackMethod_CloseRegion<
    v1::ShardService::WithRawCallbackMethod_StepLog<
    v1::ShardService::WithRawCallbackMethod_Replay<
        v1::ShardService::CallbackService>>>>>>>>>>>>>>>>;
// clang-format on

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
    // Null: no metrics. Otherwise told of each checkpoint snapshot a
    // Checkpoint call arms or names (its durations); outlives the service.
    ServerMetrics* metrics = nullptr;
    // Called once when the shard's state is lost (a device error,
    // ShardStore::fault()); the server reports NOT_SERVING.
    std::function<void(const absl::Status&)> on_state_lost;
  };
  explicit ShardServiceImpl(Config config);

  // The unary methods: ServeUnary with the typed handler of each.
  grpc::ServerUnaryReactor* Init(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ApplyStep(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Inspect(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* OpenRegion(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CloseRegion(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  // The streaming methods.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Gather(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushGrad(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadSnapshot(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* SetWeights(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StepLog(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Replay(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;

  // Counts the call of `method` and authorizes its caller: OK, or the
  // UNAUTHENTICATED / PERMISSION_DENIED refusal (counted).
  absl::Status Admit(grpc::CallbackServerContext* context,
                     absl::string_view method);
  // The state of this server's own slot after Init; FAILED_PRECONDITION
  // before.
  absl::StatusOr<std::shared_ptr<ModelShard>> state() const;
  // The state of the slot a call names (wire/slot_metadata.h): the own
  // slot's without the metadata, the replica's for slot k - 1 mod S when
  // this server keeps one; FAILED_PRECONDITION naming the slots it holds
  // otherwise.
  absl::StatusOr<std::shared_ptr<ModelShard>> StateFor(
      const grpc::CallbackServerContext& context) const;
  // The same, and PERMISSION_DENIED naming `method` when `run_id` is not
  // the initialised run's.
  absl::StatusOr<std::shared_ptr<ModelShard>> StateOfRun(
      const grpc::CallbackServerContext& context, absl::string_view method,
      const std::string& run_id) const;
  RpcCounters& counters() { return counters_; }

 private:
  absl::Status DoInit(const v1::InitRequest& request,
                      v1::InitResponse* response);
  absl::Status DoInspect(const grpc::CallbackServerContext& context,
                         const v1::InspectRequest& request,
                         v1::InspectResponse* response);
  // The KV scope of a call: INVALID_ARGUMENT for a bad run id,
  // PERMISSION_DENIED for another run than the initialised server's.
  absl::StatusOr<KvScope> KvScopeOf(const std::string& run_id,
                                    uint64_t attempt) const;
  // A typed unary handler: runs after the caller is authorized and the
  // request parsed; finishes the call through `reply`, now (FinishUnary) or
  // later from the reactor it returns.
  template <class Request, class Response>
  using UnaryHandler = grpc::ServerUnaryReactor* (
      ShardServiceImpl::*)(grpc::CallbackServerContext* context,
                           const Request* request, UnaryReply<Response>* reply);
  // Authorizes the caller of `method`, parses `request` (INVALID_ARGUMENT
  // "<method>: request does not parse") and runs `handler`, whose reply is
  // serialised into `response` as the call finishes.
  template <class Request, class Response>
  grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context,
                                       absl::string_view method,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response,
                                       UnaryHandler<Request, Response> handler);
  // Finishes a unary call now with `status`, counted; `reply` goes out when
  // it is OK.
  template <class Response>
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                        const absl::Status& status,
                                        UnaryReply<Response>* reply);

  grpc::ServerUnaryReactor* HandleInit(grpc::CallbackServerContext* context,
                                       const v1::InitRequest* request,
                                       UnaryReply<v1::InitResponse>* reply);
  grpc::ServerUnaryReactor* HandleApplyStep(
      grpc::CallbackServerContext* context, const v1::ApplyStepRequest* request,
      UnaryReply<v1::ApplyStepResponse>* reply);
  grpc::ServerUnaryReactor* HandleInspect(
      grpc::CallbackServerContext* context, const v1::InspectRequest* request,
      UnaryReply<v1::InspectResponse>* reply);
  grpc::ServerUnaryReactor* HandleCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::CheckpointRequest* request,
      UnaryReply<v1::CheckpointResponse>* reply);
  grpc::ServerUnaryReactor* HandleRestore(
      grpc::CallbackServerContext* context, const v1::RestoreRequest* request,
      UnaryReply<v1::RestoreResponse>* reply);
  grpc::ServerUnaryReactor* HandleKvSet(grpc::CallbackServerContext* context,
                                        const v1::KvSetRequest* request,
                                        UnaryReply<v1::KvSetResponse>* reply);
  grpc::ServerUnaryReactor* HandleKvGet(grpc::CallbackServerContext* context,
                                        const v1::KvGetRequest* request,
                                        UnaryReply<v1::KvGetResponse>* reply);
  grpc::ServerUnaryReactor* HandleKvWait(grpc::CallbackServerContext* context,
                                         const v1::KvWaitRequest* request,
                                         UnaryReply<v1::KvWaitResponse>* reply);
  grpc::ServerUnaryReactor* HandleOpenRegion(
      grpc::CallbackServerContext* context,
      const v1::OpenRegionRequest* request,
      UnaryReply<v1::OpenRegionResponse>* reply);
  grpc::ServerUnaryReactor* HandleCloseRegion(
      grpc::CallbackServerContext* context,
      const v1::CloseRegionRequest* request,
      UnaryReply<v1::CloseRegionResponse>* reply);

  const Config config_;
  RpcCounters counters_;
  // steady_clock nanoseconds of the last admitted PushGrad; 0: none.
  std::atomic<int64_t> last_push_ns_{0};
  KvStore kv_;
  SharedRegions regions_;
  IdleStreams push_streams_;
  absl::Mutex init_mu_;  // serialises Init
  mutable absl::Mutex mu_;
  std::shared_ptr<ModelShard> state_ ABSL_GUARDED_BY(mu_);
  // With replicas 2: the copy of slot k - 1 mod S this server keeps.
  std::shared_ptr<ModelShard> replica_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SERVICE_IMPL_H_
