#include "server/shard_service_impl.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/gather_reactor.h"
#include "server/checkpoint_wait_reactor.h"
#include "server/kv_wait_reactor.h"
#include "server/push_grad_reactor.h"
#include "server/read_snapshot_reactor.h"
#include "server/set_weights_reactor.h"
#include "server/step_log_reactors.h"
#include "server/shard_restore.h"
#include "server/status_reactor.h"
#include "wire/grpc_status.h"
#include "wire/proto_convert.h"
#include "wire/slot_metadata.h"

namespace zeroshard {
namespace {

// A reactor that finishes at once with an error.
template <class Reactor>
class FailedReactor : public StatusReactor<Reactor> {
 public:
  FailedReactor(const absl::Status& status, RpcCounters* counters)
      : status_(status), counters_(counters) {
    // Counted before the client can see the status, so that an Inspect
    // that follows the failed call already includes it.
    counters_->RecordResult(status_);
    this->FinishWith(status);
  }
  void OnDone() override { delete this; }

 private:
  absl::Status status_;
  RpcCounters* counters_;
};

void FillInitResponse(const ModelShard& state, bool already,
                      v1::InitResponse* response) {
  response->set_owned_begin(state.owned().begin);
  response->set_owned_end(state.owned().end);
  response->set_total_elems(state.layout().total_elems());
  response->set_already_initialized(already);
}

}  // namespace

// Finishes the unary call (through `reply`) with `expr`'s status unless it
// is OK.
#define RETURN_UNARY_IF_ERROR(expr)           \
  do {                                        \
    if (absl::Status _s = (expr); !_s.ok()) { \
      return FinishUnary(context, _s, reply); \
    }                                         \
  } while (0)

ShardServiceImpl::ShardServiceImpl(Config config)
    : config_(std::move(config)), push_streams_(config_.push_idle_timeout) {}

absl::Status ShardServiceImpl::Admit(grpc::CallbackServerContext* context,
                                    absl::string_view method) {
  counters_.RecordCall(method);
  if (config_.authorizer == nullptr) return absl::OkStatus();
  absl::Status s = config_.authorizer->Authorize(*context, method);
  if (s.code() == absl::StatusCode::kUnauthenticated ||
      s.code() == absl::StatusCode::kPermissionDenied) {
    counters_.RecordRefusal(method, s);
  }
  return s;
}

absl::StatusOr<std::shared_ptr<ModelShard>> ShardServiceImpl::state() const {
  absl::MutexLock lock(&mu_);
  if (state_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kNotInitialisedMessage, "; call Init first"));
  }
  return state_;
}

absl::StatusOr<std::shared_ptr<ModelShard>> ShardServiceImpl::StateFor(
    const grpc::CallbackServerContext& context) const {
  ASSIGN_OR_RETURN(const std::optional<uint32_t> slot,
                   SlotFromMetadata(context.client_metadata()));
  if (!slot.has_value() || *slot == config_.identity.server_index) {
    return state();
  }
  absl::MutexLock lock(&mu_);
  if (state_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kNotInitialisedMessage, "; call Init first"));
  }
  if (replica_ != nullptr &&
      *slot == replica_->request().server_index()) {
    return replica_;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "server ", config_.identity.server_index, " holds slot ",
      config_.identity.server_index,
      replica_ == nullptr
          ? std::string(" only (the run keeps one copy of each slot)")
          : absl::StrCat(" and a replica of slot ",
                         replica_->request().server_index()),
      ", not slot ", *slot));
}

namespace {

// A write to a slot of a run that keeps two copies must come from a client
// that writes both (wire/slot_metadata.h "zs-copies").
absl::Status CheckWritesBothCopies(const grpc::CallbackServerContext& context,
                                   const ModelShard& state,
                                   absl::string_view method) {
  if (state.request().replicas() < 2 ||
      CopiesFromMetadata(context.client_metadata()) == 2) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      method, ": this run keeps 2 copies of each slot (zeroshard.replicas "
      "2), and the caller writes one, which would make the copies differ; "
      "give the client replicas 2 (zeroshard-ctl --replicas=2)"));
}

}  // namespace

template <class Request, class Response>
grpc::ServerUnaryReactor* ShardServiceImpl::ServeUnary(
    grpc::CallbackServerContext* context, absl::string_view method,
    const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
    UnaryHandler<Request, Response> handler) {
  UnaryReply<Response> reply(response);
  // Authorized before parsing: a refused caller learns nothing of the
  // request's checks.
  if (absl::Status s = Admit(context, method); !s.ok()) {
    return FinishUnary(context, s, &reply);
  }
  Request parsed;
  if (absl::Status s = ParseRequest(method, *request, &parsed); !s.ok()) {
    return FinishUnary(context, s, &reply);
  }
  return (this->*handler)(context, &parsed, &reply);
}

template <class Response>
grpc::ServerUnaryReactor* ShardServiceImpl::FinishUnary(
    grpc::CallbackServerContext* context, const absl::Status& status,
    UnaryReply<Response>* reply) {
  counters_.RecordResult(status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reply->Finish(reactor, status);
  return reactor;
}

grpc::ServerUnaryReactor* ShardServiceImpl::Init(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "Init", request, response,
                    &ShardServiceImpl::HandleInit);
}

grpc::ServerUnaryReactor* ShardServiceImpl::ApplyStep(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "ApplyStep", request, response,
                    &ShardServiceImpl::HandleApplyStep);
}

grpc::ServerUnaryReactor* ShardServiceImpl::Inspect(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "Inspect", request, response,
                    &ShardServiceImpl::HandleInspect);
}

grpc::ServerUnaryReactor* ShardServiceImpl::Checkpoint(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "Checkpoint", request, response,
                    &ShardServiceImpl::HandleCheckpoint);
}

grpc::ServerUnaryReactor* ShardServiceImpl::Restore(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "Restore", request, response,
                    &ShardServiceImpl::HandleRestore);
}

grpc::ServerUnaryReactor* ShardServiceImpl::KvSet(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "KvSet", request, response,
                    &ShardServiceImpl::HandleKvSet);
}

grpc::ServerUnaryReactor* ShardServiceImpl::KvGet(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "KvGet", request, response,
                    &ShardServiceImpl::HandleKvGet);
}

grpc::ServerUnaryReactor* ShardServiceImpl::OpenRegion(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "OpenRegion", request, response,
                    &ShardServiceImpl::HandleOpenRegion);
}

grpc::ServerUnaryReactor* ShardServiceImpl::CloseRegion(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "CloseRegion", request, response,
                    &ShardServiceImpl::HandleCloseRegion);
}

grpc::ServerUnaryReactor* ShardServiceImpl::KvWait(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary(context, "KvWait", request, response,
                    &ShardServiceImpl::HandleKvWait);
}

absl::Status ShardServiceImpl::DoInit(const v1::InitRequest& request,
                                     v1::InitResponse* response) {
  absl::MutexLock init_lock(&init_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (state_ != nullptr && request.replace()) {
      if (state_->run_id() != request.run_id()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Init with replace: this server serves run '", state_->run_id(),
            "', not '", request.run_id(), "'; only the same run may replace "
            "its model (restart the server for another run)"));
      }
      // Replaced below, identical or not (a new model starts from its own
      // values at step 0); calls in flight finish on the old state.
    } else if (state_ != nullptr) {
      ASSIGN_OR_RETURN(v1::InitRequest normal, ModelShard::Normalize(request));
      const std::string conflict =
          ModelShard::DescribeConflict(state_->request(), normal);
      if (!conflict.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Init conflicts with the existing state: its ", conflict,
            " differs from the request the server was initialised with; "
            "nothing changed (restart the server to change it)"));
      }
      FillInitResponse(*state_, /*already=*/true, response);
      return absl::OkStatus();
    }
  }
  // Allocating and filling may take a while: done outside mu_ so that
  // Inspect and KV calls keep being served.
  ASSIGN_OR_RETURN(std::shared_ptr<ModelShard> state,
                   ModelShard::Create(request, config_.identity,
                                      config_.placement));
  state->set_pending_grad_limit(config_.max_pending_grad_bytes);
  state->set_fault_listener(config_.on_state_lost);
  // The replica of the previous slot: the same request for that slot, so
  // its initial values, rule and chunks are the ones its first holder has.
  std::shared_ptr<ModelShard> replica;
  if (state->request().replicas() == 2) {
    const uint32_t S = config_.identity.num_servers;
    const uint32_t slot = (config_.identity.server_index + S - 1) % S;
    v1::InitRequest for_slot = request;
    for_slot.set_server_index(slot);
    ASSIGN_OR_RETURN(replica, ModelShard::Create(for_slot, {slot, S},
                                                 config_.placement));
    replica->set_pending_grad_limit(config_.max_pending_grad_bytes);
    replica->set_fault_listener(config_.on_state_lost);
  }
  FillInitResponse(*state, /*already=*/false, response);
  const std::string run_id = state->run_id();
  {
    absl::MutexLock lock(&mu_);
    state_ = std::move(state);
    replica_ = std::move(replica);
  }
  // Only the server's run may use the store from now on.
  kv_.RetainOnlyRun(run_id);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleInit(
    grpc::CallbackServerContext* context, const v1::InitRequest* request,
    UnaryReply<v1::InitResponse>* reply) {
  return FinishUnary(context, DoInit(*request, reply->message()), reply);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ShardServiceImpl::Gather(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  using Failed = FailedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
  if (absl::Status s = Admit(context, "Gather"); !s.ok()) {
    return new Failed(s, &counters_);
  }
  v1::GatherRequest parsed;
  if (absl::Status s = ParseRequest("Gather", *request, &parsed); !s.ok()) {
    return new Failed(s, &counters_);
  }
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  if (!state.ok()) return new Failed(state.status(), &counters_);
  absl::StatusOr<GatherPlan> plan = PlanGather(**state, parsed, &regions_);
  if (!plan.ok()) return new Failed(plan.status(), &counters_);
  return new GatherReactor(*std::move(state), *std::move(plan), &counters_);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ShardServiceImpl::PushGrad(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  using Failed = FailedReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>;
  if (absl::Status s = Admit(context, "PushGrad"); !s.ok()) {
    return new Failed(s, &counters_);
  }
  last_push_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count(),
                      std::memory_order_relaxed);
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  if (!state.ok()) return new Failed(state.status(), &counters_);
  if (absl::Status s = CheckWritesBothCopies(*context, **state, "PushGrad");
      !s.ok()) {
    return new Failed(s, &counters_);
  }
  return new PushGradReactor(*std::move(state), response, &counters_,
                             &push_streams_, &regions_);
}

absl::StatusOr<std::shared_ptr<ModelShard>> ShardServiceImpl::StateOfRun(
    const grpc::CallbackServerContext& context, absl::string_view method,
    const std::string& run_id) const {
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(context);
  if (state.ok() && run_id != (*state)->run_id()) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " names run '", run_id,
                     "', but this server serves run '", (*state)->run_id(), "'"));
  }
  return state;
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleApplyStep(
    grpc::CallbackServerContext* context, const v1::ApplyStepRequest* request,
    UnaryReply<v1::ApplyStepResponse>* reply) {
  absl::StatusOr<std::shared_ptr<ModelShard>> state =
      StateOfRun(*context, "ApplyStep", request->run_id());
  RETURN_UNARY_IF_ERROR(state.status());
  RETURN_UNARY_IF_ERROR(CheckWritesBothCopies(*context, **state, "ApplyStep"));
  absl::StatusOr<ApplyResult> r =
      (*state)->ApplyPrepared(request->step(), request->attempt());
  RETURN_UNARY_IF_ERROR(r.status());
  v1::ApplyStepResponse* response = reply->message();
  response->set_applied_elems(r->applied_elems);
  response->set_duplicate_elems(r->duplicate_elems);
  response->set_chunks_completed(r->chunks_completed);
  response->set_pushes(r->pushes);
  return FinishUnary(context, absl::OkStatus(), reply);
}

absl::Status ShardServiceImpl::DoInspect(
    const grpc::CallbackServerContext& context,
    const v1::InspectRequest& request, v1::InspectResponse* response) {
  response->set_server_index(config_.identity.server_index);
  response->set_num_servers(config_.identity.num_servers);
  response->set_placement(std::string(PlacementName(config_.placement)));
  response->set_slot(config_.identity.server_index);
  counters_.Fill(response->mutable_counters());
  ASSIGN_OR_RETURN(const std::optional<uint32_t> slot,
                   SlotFromMetadata(context.client_metadata()));
  absl::StatusOr<std::shared_ptr<ModelShard>> maybe = StateFor(context);
  // Not initialised: initialized = false, unless the call named another
  // slot, which this server cannot describe.
  if (!maybe.ok() && !(slot.has_value() && state().ok())) {
    return absl::OkStatus();
  }
  if (!maybe.ok()) return maybe.status();
  const ModelShard& state = **maybe;
  response->set_slot(state.request().server_index());
  response->set_replicas(state.request().replicas());
  response->set_initialized(true);
  response->set_owned_begin(state.owned().begin);
  response->set_owned_end(state.owned().end);
  response->set_total_elems(state.layout().total_elems());
  response->set_chunk_elems(state.chunk_elems());
  response->set_num_chunks(state.num_chunks());
  if (request.state_digest()) {
    ASSIGN_OR_RETURN(const ModelShard::StateDigest d, state.Digest());
    response->set_state_digest(d.digest);
    response->set_state_digest_version(d.version);
  }
  const StepTracker::Summary summary = state.versions();
  response->set_min_version(summary.min_version);
  response->set_max_version(summary.max_version);
  response->set_adam_step(summary.min_adam_step);
  // As Init gave it: with the parameter groups and their ranges.
  *response->mutable_optimizer() = state.request().optimizer();
  for (const auto& [kind, bytes] : state.BytesByKind()) {
    (*response->mutable_bytes_by_kind())[kind] = bytes;
  }
  ASSIGN_OR_RETURN(const StateNorms norms, state.Norms());
  response->mutable_norms()->set_master(norms.master);
  const absl::Span<const StateSlot> slots = state.rule().slots();
  for (size_t k = 0; k < slots.size() && k < norms.slots.size(); ++k) {
    response->add_state_slots(slots[k].name);
    (*response->mutable_norms()->mutable_state())[slots[k].name] =
        norms.slots[k];
    if (absl::string_view(slots[k].name) == "exp_avg") {
      response->mutable_norms()->set_exp_avg(norms.slots[k]);
    } else if (absl::string_view(slots[k].name) == "exp_avg_sq") {
      response->mutable_norms()->set_exp_avg_sq(norms.slots[k]);
    }
  }
  response->set_partial_chunks(summary.partial_chunks);
  response->set_attempt(state.attempt());
  const ModelShard::PreparedSummary prepared = state.prepared();
  response->set_prepared_elems(prepared.elems);
  response->set_prepared_step(prepared.step);
  response->set_prepared_attempt(prepared.attempt);
  response->set_pending_grad_bytes(state.pending_grad_bytes());
  response->set_pending_grad_limit_bytes(state.pending_grad_limit());
  *response->mutable_manifest() = state.request().manifest();
  response->set_run_id(state.run_id());
  response->set_num_workers(state.layout().num_workers());
  const int64_t pushed = last_push_ns_.load(std::memory_order_relaxed);
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  response->set_seconds_since_push(pushed == 0 ? -1.0 : (now - pushed) * 1e-9);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleInspect(
    grpc::CallbackServerContext* context, const v1::InspectRequest* request,
    UnaryReply<v1::InspectResponse>* reply) {
  return FinishUnary(context, DoInspect(*context, *request, reply->message()),
                     reply);
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleCheckpoint(
    grpc::CallbackServerContext* context, const v1::CheckpointRequest* request,
    UnaryReply<v1::CheckpointResponse>* reply) {
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  RETURN_UNARY_IF_ERROR(state.status());
  absl::StatusOr<std::shared_ptr<ShardSnapshot>> snap =
      (*state)->ArmSnapshot(request->step(), request->directory());
  RETURN_UNARY_IF_ERROR(snap.status());
  if (config_.metrics != nullptr) config_.metrics->WatchSnapshot(*snap);
  if (request->wait()) {
    return new CheckpointWaitReactor(context, *std::move(snap),
                                     std::move(*reply), &counters_);
  }
  const auto result = (*snap)->result();
  if (result.has_value() && !result->ok()) {
    return FinishUnary(context, result->status(), reply);
  }
  FillCheckpointResponse(**snap, result.has_value() ? &**result : nullptr,
                         reply->message());
  return FinishUnary(context, absl::OkStatus(), reply);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ShardServiceImpl::ReadSnapshot(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  using Failed = FailedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
  if (absl::Status s = Admit(context, "ReadSnapshot"); !s.ok()) {
    return new Failed(s, &counters_);
  }
  v1::ReadSnapshotRequest parsed;
  if (absl::Status s = ParseRequest("ReadSnapshot", *request, &parsed);
      !s.ok()) {
    return new Failed(s, &counters_);
  }
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  if (!state.ok()) return new Failed(state.status(), &counters_);
  absl::StatusOr<ReadSnapshotPlan> plan = PlanReadSnapshot(**state, parsed);
  if (!plan.ok()) return new Failed(plan.status(), &counters_);
  return new ReadSnapshotReactor(*std::move(plan), &counters_);
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleRestore(
    grpc::CallbackServerContext* context, const v1::RestoreRequest* request,
    UnaryReply<v1::RestoreResponse>* reply) {
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  RETURN_UNARY_IF_ERROR(state.status());
  RETURN_UNARY_IF_ERROR(CheckWritesBothCopies(*context, **state, "Restore"));
  // Reads and verifies whole files: run off the callback threads' budget
  // only in the sense that no other call waits on it (restores happen
  // before training resumes).
  absl::StatusOr<RestoreStats> stats = RestoreShard(
      **state, request->directory(),
      request->has_step() ? std::optional<uint64_t>(request->step())
                          : std::nullopt);
  RETURN_UNARY_IF_ERROR(stats.status());
  v1::RestoreResponse* response = reply->message();
  response->set_version(stats->step);
  response->set_adam_step(stats->adam_step);
  response->set_files_verified(stats->files_verified);
  response->set_bytes_read(stats->bytes_read);
  response->set_seconds(stats->seconds);
  return FinishUnary(context, absl::OkStatus(), reply);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ShardServiceImpl::SetWeights(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  if (absl::Status s = Admit(context, "SetWeights"); !s.ok()) {
    return new FailedReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>(
        s, &counters_);
  }
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  if (state.ok()) {
    if (absl::Status s = CheckWritesBothCopies(*context, **state, "SetWeights");
        !s.ok()) {
      state = s;
    }
  }
  return new SetWeightsReactor(context, std::move(state), response,
                               &counters_);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ShardServiceImpl::StepLog(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  using Failed = FailedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
  if (absl::Status s = Admit(context, "StepLog"); !s.ok()) {
    return new Failed(s, &counters_);
  }
  v1::StepLogRequest parsed;
  if (absl::Status s = ParseRequest("StepLog", *request, &parsed); !s.ok()) {
    return new Failed(s, &counters_);
  }
  absl::StatusOr<std::shared_ptr<ModelShard>> state =
      StateOfRun(*context, "StepLog", parsed.run_id());
  if (!state.ok()) return new Failed(state.status(), &counters_);
  ModelShard& shard = **state;
  std::vector<std::shared_ptr<const LoggedPush>> pushes;
  switch (parsed.action()) {
    case v1::StepLogRequest::OPEN:
      if (absl::Status s = shard.OpenStepLog(parsed.from_step()); !s.ok()) {
        return new Failed(s, &counters_);
      }
      break;
    case v1::StepLogRequest::CLOSE:
      shard.CloseStepLog();
      break;
    case v1::StepLogRequest::READ: {
      auto read = shard.ReadStepLog(parsed.from_step());
      if (!read.ok()) return new Failed(read.status(), &counters_);
      pushes = *std::move(read);
      break;
    }
    default:
      return new Failed(
          absl::InvalidArgumentError(absl::StrCat(
              "StepLog: unknown action ", static_cast<int>(parsed.action()))),
          &counters_);
  }
  return new StepLogReactor(std::move(pushes), shard.run_id(), &counters_);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ShardServiceImpl::Replay(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  if (absl::Status s = Admit(context, "Replay"); !s.ok()) {
    return new FailedReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>(
        s, &counters_);
  }
  absl::StatusOr<std::shared_ptr<ModelShard>> state = StateFor(*context);
  if (state.ok()) {
    if (absl::Status s = CheckWritesBothCopies(*context, **state, "Replay");
        !s.ok()) {
      state = s;
    }
  }
  return new ReplayReactor(context, std::move(state), response, &counters_);
}

absl::StatusOr<KvScope> ShardServiceImpl::KvScopeOf(
    const std::string& run_id, uint64_t attempt) const {
  RETURN_IF_ERROR(KvStore::ValidateRunId(run_id));
  absl::MutexLock lock(&mu_);
  if (state_ != nullptr && state_->run_id() != run_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "this server serves run '", state_->run_id(),
        "'; the key-value store refuses run '", run_id, "'"));
  }
  return KvScope{run_id, attempt};
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleKvSet(
    grpc::CallbackServerContext* context, const v1::KvSetRequest* request,
    UnaryReply<v1::KvSetResponse>* reply) {
  counters_.AddBytesIn(request->value().size());
  absl::StatusOr<KvScope> scope =
      KvScopeOf(request->run_id(), request->attempt());
  RETURN_UNARY_IF_ERROR(scope.status());
  return FinishUnary(context, kv_.Set(*scope, request->key(), request->value()),
                     reply);
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleKvGet(
    grpc::CallbackServerContext* context, const v1::KvGetRequest* request,
    UnaryReply<v1::KvGetResponse>* reply) {
  absl::StatusOr<KvScope> scope =
      KvScopeOf(request->run_id(), request->attempt());
  RETURN_UNARY_IF_ERROR(scope.status());
  absl::StatusOr<std::optional<std::string>> value =
      kv_.Get(*scope, request->key());
  if (value.ok() && value->has_value()) {
    reply->message()->set_found(true);
    reply->message()->set_value(**std::move(value));
  }
  return FinishUnary(context, value.status(), reply);
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleKvWait(
    grpc::CallbackServerContext* context, const v1::KvWaitRequest* request,
    UnaryReply<v1::KvWaitResponse>* reply) {
  absl::StatusOr<KvScope> scope =
      KvScopeOf(request->run_id(), request->attempt());
  RETURN_UNARY_IF_ERROR(scope.status());
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  RETURN_UNARY_IF_ERROR(KvStore::ValidateKeys(keys));
  return new KvWaitReactor(context, &kv_, *scope, keys, std::move(*reply),
                           &counters_);
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleOpenRegion(
    grpc::CallbackServerContext* context, const v1::OpenRegionRequest* request,
    UnaryReply<v1::OpenRegionResponse>* reply) {
  absl::StatusOr<std::shared_ptr<ModelShard>> state =
      StateOfRun(*context, "OpenRegion", request->run_id());
  RETURN_UNARY_IF_ERROR(state.status());
  // A region has room for a push and a gather of the whole owned range in
  // FP32; all of them together for twice that (ranks that each push and
  // gather their share need one such region's worth between them).
  const uint64_t max_bytes =
      SharedMemory::kDataOffset + 2 * (*state)->owned().size() * sizeof(float);
  absl::StatusOr<SharedRegions::Opened> opened = regions_.Open(
      request->bytes(), max_bytes,
      2 * max_bytes + SharedRegions::kMaxRegions * SharedMemory::kDataOffset);
  RETURN_UNARY_IF_ERROR(opened.status());
  v1::OpenRegionResponse* response = reply->message();
  response->set_region(opened->id);
  response->set_pid(static_cast<int64_t>(::getpid()));
  response->set_fd(opened->memory->fd());
  response->set_nonce(opened->memory->nonce());
  response->set_data_offset(SharedMemory::kDataOffset);
  response->set_bytes(opened->memory->size());
  return FinishUnary(context, absl::OkStatus(), reply);
}

grpc::ServerUnaryReactor* ShardServiceImpl::HandleCloseRegion(
    grpc::CallbackServerContext* context,
    const v1::CloseRegionRequest* request,
    UnaryReply<v1::CloseRegionResponse>* reply) {
  return FinishUnary(context, regions_.Close(request->region()), reply);
}

}  // namespace zeroshard
