#include "client/kv_client.h"

#include <algorithm>
#include <functional>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/retry_policy.h"
#include "client/shard_channels.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "wire/credentials.h"
#include "wire/grpc_status.h"

namespace zeroshard {

struct KvClient::Stub {
  std::unique_ptr<v1::ShardService::Stub> stub;
};

namespace {

// Runs `call` with a deadline, retrying UNAVAILABLE until `deadline`.
absl::Status CallUntil(
    absl::Time deadline, const std::string& what, const std::string& address,
    const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  RetryPolicy policy;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    absl::Status s = FromGrpcStatus(call(&ctx), what, address);
    if (s.ok() || !IsRetryableCode(s.code())) return s;
    const absl::Duration delay = BackoffDelay(
        policy, std::min(attempt, 10), 0x9E3779B97F4A7C15ull * attempt);
    if (absl::Now() + delay >= deadline) return s;
    absl::SleepFor(delay);
  }
}

}  // namespace

KvClient::KvClient(std::string address, Scope scope,
                   absl::Duration control_timeout,
                   std::shared_ptr<const Stub> stub)
    : address_(std::move(address)),
      scope_(std::move(scope)),
      control_timeout_(control_timeout),
      stub_(std::move(stub)) {}

absl::StatusOr<std::unique_ptr<KvClient>> KvClient::Connect(
    const std::string& address, Scope scope, absl::Duration control_timeout,
    std::shared_ptr<const ClientSecurity> security) {
  auto parsed = ParseServerList(address);
  if (!parsed.ok()) return parsed.status();
  if (parsed->size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvClient needs one address, got '", address, "'"));
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectAttemptMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = CreateClientChannel(address, args, std::move(security));
  return std::unique_ptr<KvClient>(new KvClient(
      address, std::move(scope), control_timeout,
      std::make_shared<const Stub>(Stub{v1::ShardService::NewStub(channel)})));
}

std::unique_ptr<KvClient> KvClient::WithAttempt(uint64_t attempt) const {
  return std::unique_ptr<KvClient>(new KvClient(
      address_, {scope_.run_id, attempt}, control_timeout_, stub_));
}

absl::Status KvClient::Set(const std::string& key, const std::string& value) {
  v1::KvSetRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_run_id(scope_.run_id);
  req.set_attempt(scope_.attempt);
  v1::KvSetResponse resp;
  return CallUntil(absl::Now() + control_timeout_,
                   absl::StrCat("KvSet('", key, "')"), address_,
                   [&](grpc::ClientContext* ctx) {
                     return stub_->stub->KvSet(ctx, req, &resp);
                   });
}

absl::StatusOr<std::string> KvClient::TryGet(const std::string& key) {
  v1::KvGetRequest req;
  req.set_key(key);
  req.set_run_id(scope_.run_id);
  req.set_attempt(scope_.attempt);
  v1::KvGetResponse resp;
  absl::Status s = CallUntil(absl::Now() + control_timeout_,
                             absl::StrCat("KvGet('", key, "')"), address_,
                             [&](grpc::ClientContext* ctx) {
                               return stub_->stub->KvGet(ctx, req, &resp);
                             });
  if (!s.ok()) return s;
  if (!resp.found()) {
    return absl::NotFoundError(
        absl::StrCat("rendezvous key '", key, "' is not set on ", address_));
  }
  return resp.value();
}

absl::Status KvClient::Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) {
  v1::KvWaitRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_run_id(scope_.run_id);
  req.set_attempt(scope_.attempt);
  v1::KvWaitResponse resp;
  absl::Status s = CallUntil(
      absl::Now() + timeout,
      absl::StrCat("KvWait('", absl::StrJoin(keys, "', '"), "')"), address_,
      [&](grpc::ClientContext* ctx) { return stub_->stub->KvWait(ctx, req, &resp); });
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous keys '", absl::StrJoin(keys, "', '"), "' not all set on ",
        address_, " within ", absl::FormatDuration(timeout)));
  }
  return s;
}

absl::StatusOr<std::string> KvClient::Get(const std::string& key,
                                          absl::Duration timeout) {
  if (absl::Status s = Wait({key}, timeout); !s.ok()) return s;
  return TryGet(key);
}

}  // namespace zeroshard
