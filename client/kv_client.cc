#include "client/kv_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/call_canceller.h"
#include "client/client_options.h"
#include "client/retry_policy.h"
#include "client/shard_channels.h"
#include "common/logging.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"
#include "wire/credentials.h"
#include "wire/grpc_status.h"

namespace zeroshard {

struct KvClient::Holders {
  struct One {
    std::string address;
    std::unique_ptr<v1::ShardService::Stub> stub;
    std::atomic<bool> left{false};
    // It has answered a call of this client or a sibling's.
    std::atomic<bool> answered{false};
  };
  std::vector<std::unique_ptr<One>> list;
  absl::Mutex mu;
  std::function<bool(size_t)> is_down ABSL_GUARDED_BY(mu);
};

struct KvClient::Outcome {
  // Per holder: its last status, or nothing when it was not called.
  std::vector<std::optional<absl::Status>> status;
  // Some holder answered: OK, or an error that is its answer (not
  // UNAVAILABLE, DEADLINE_EXCEEDED or CANCELLED).
  bool answered = false;
  // The first answer that is an error; or, when none answered, the first
  // holder's failure.
  absl::Status error;
};

namespace {

bool IsAnswer(const absl::Status& s) {
  return s.ok() || (s.code() != absl::StatusCode::kUnavailable &&
                    s.code() != absl::StatusCode::kDeadlineExceeded &&
                    s.code() != absl::StatusCode::kCancelled);
}

// Runs `call` with a deadline, retrying UNAVAILABLE until `deadline` or
// until `cancel` is cancelled (then CANCELLED).
absl::Status CallUntil(
    absl::Time deadline, const std::string& what, const std::string& address,
    const std::function<grpc::Status(grpc::ClientContext*)>& call,
    CallCanceller* cancel = nullptr) {
  RetryPolicy policy;
  for (int attempt = 0;; ++attempt) {
    absl::Status s;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      const ScopedCall scoped(cancel, &ctx);
      if (!scoped.registered()) {
        return absl::CancelledError(
            absl::StrCat(what, " at ", address, ": cancelled"));
      }
      s = FromGrpcStatus(call(&ctx), what, address);
    }
    if (s.ok() || !IsRetryableCode(s.code())) return s;
    const absl::Duration delay = BackoffDelay(policy, std::min(attempt, 10),
                                              0x9E3779B97F4A7C15ull * attempt);
    if (absl::Now() + delay >= deadline) return s;
    absl::SleepFor(delay);
  }
}

}  // namespace

std::vector<std::string> KvHolders(const std::vector<std::string>& servers,
                                   int replicas, size_t first) {
  const size_t n = std::clamp<size_t>(
      static_cast<size_t>(std::max(replicas, 1)), 1, servers.size());
  std::vector<std::string> holders;
  for (size_t i = 0; i < n; ++i) {
    holders.push_back(servers[(first + i) % servers.size()]);
  }
  return holders;
}

KvClient::KvClient(Scope scope, absl::Duration control_timeout,
                   std::shared_ptr<Holders> holders)
    : scope_(std::move(scope)),
      control_timeout_(control_timeout),
      holders_(std::move(holders)) {}

absl::StatusOr<std::unique_ptr<KvClient>> KvClient::Connect(
    const std::string& holders, Scope scope, absl::Duration control_timeout,
    std::shared_ptr<const ClientSecurity> security) {
  auto parsed = ParseServerList(holders);
  if (!parsed.ok()) return parsed.status();
  return Connect(*parsed, std::move(scope), control_timeout,
                 std::move(security));
}

absl::StatusOr<std::unique_ptr<KvClient>> KvClient::Connect(
    const std::vector<std::string>& holders, Scope scope,
    absl::Duration control_timeout,
    std::shared_ptr<const ClientSecurity> security) {
  if (holders.empty()) {
    return absl::InvalidArgumentError("KvClient needs a holder's address");
  }
  auto shared = std::make_shared<Holders>();
  for (const std::string& address : holders) {
    auto parsed = ParseServerList(address);
    if (!parsed.ok()) return parsed.status();
    if (parsed->size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("KvClient: '", address, "' is not one address"));
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectAttemptMs);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    auto one = std::make_unique<Holders::One>();
    one->address = address;
    one->stub =
        v1::ShardService::NewStub(CreateClientChannel(address, args, security));
    shared->list.push_back(std::move(one));
  }
  return std::unique_ptr<KvClient>(
      new KvClient(std::move(scope), control_timeout, std::move(shared)));
}

std::unique_ptr<KvClient> KvClient::WithAttempt(uint64_t attempt) const {
  return std::unique_ptr<KvClient>(
      new KvClient({scope_.run_id, attempt}, control_timeout_, holders_));
}

size_t KvClient::holders() const { return holders_->list.size(); }

bool KvClient::left(size_t i) const {
  return i < holders_->list.size() && holders_->list[i]->left.load();
}

void KvClient::FollowFailover(std::function<bool(size_t)> is_down) {
  absl::MutexLock lock(&holders_->mu);
  holders_->is_down = std::move(is_down);
}

KvClient::Outcome KvClient::OnHolders(absl::Time deadline,
                                      const std::string& what, bool first,
                                      const HolderCall& call) const {
  const size_t n = holders_->list.size();
  std::vector<size_t> live;
  {
    absl::MutexLock lock(&holders_->mu);
    for (size_t i = 0; i < n; ++i) {
      const bool down = holders_->is_down && holders_->is_down(i);
      if (!holders_->list[i]->left.load() && !down) live.push_back(i);
    }
  }
  // Every holder left: each is tried again (nothing is lost by it).
  if (live.empty()) {
    for (size_t i = 0; i < n; ++i) live.push_back(i);
  }
  Outcome out;
  out.status.resize(n);
  auto run = [&](size_t i, CallCanceller* cancel) {
    return CallUntil(
        deadline, what, holders_->list[i]->address,
        [&](grpc::ClientContext* ctx) { return call(i, ctx); }, cancel);
  };
  if (live.size() == 1) {
    const absl::Status s = run(live[0], nullptr);
    if (IsAnswer(s)) holders_->list[live[0]]->answered.store(true);
    out.status[live[0]] = s;
    out.answered = IsAnswer(s);
    out.error = s;
    return out;
  }
  // One thread a holder; the caller waits for the outcome's rule.
  struct Shared {
    absl::Mutex mu;
    std::vector<std::optional<absl::Status>> status ABSL_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    std::optional<absl::Time> first_answer ABSL_GUARDED_BY(mu);
    bool first_ok ABSL_GUARDED_BY(mu) = false;
  } shared;
  std::vector<CallCanceller> cancel(n);
  {
    absl::MutexLock lock(&shared.mu);
    shared.status.resize(n);
    shared.pending = live.size();
  }
  std::vector<std::thread> threads;
  threads.reserve(live.size());
  for (size_t i : live) {
    threads.emplace_back([&, i] {
      const absl::Status s = run(i, &cancel[i]);
      if (IsAnswer(s)) holders_->list[i]->answered.store(true);
      absl::MutexLock lock(&shared.mu);
      shared.status[i] = s;
      --shared.pending;
      if (IsAnswer(s) && !shared.first_answer)
        shared.first_answer = absl::Now();
      shared.first_ok = shared.first_ok || s.ok();
    });
  }
  {
    absl::MutexLock lock(&shared.mu);
    auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared.mu) {
      return shared.pending == 0 || (first && shared.first_ok);
    };
    auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared.mu) {
      return settled() || shared.first_answer.has_value();
    };
    shared.mu.AwaitWithDeadline(absl::Condition(&answered), deadline);
    // The others get kKvGrace once one has answered.
    if (!settled() && shared.first_answer) {
      shared.mu.AwaitWithDeadline(
          absl::Condition(&settled),
          std::min(deadline, *shared.first_answer + kKvGrace));
    }
  }
  for (size_t i : live) cancel[i].Cancel();
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&shared.mu);
  out.status = shared.status;
  out.answered = shared.first_answer.has_value();
  for (size_t i : live) {
    const absl::Status& s = *out.status[i];
    if (out.answered ? (!s.ok() && IsAnswer(s)) : i == live[0]) {
      if (out.error.ok()) out.error = s;
    }
  }
  // With an answer, a holder that gave none (gone, or silent past the
  // grace) is left, if it has answered before: one that never has may be
  // starting still (it is called again next time). Not for Wait, whose
  // others may be waiting still.
  if (out.answered && !first) {
    for (size_t i : live) {
      const absl::Status& s = *out.status[i];
      Holders::One& one = *holders_->list[i];
      if (IsAnswer(s) || !one.answered.load() || one.left.exchange(true)) {
        continue;
      }
      ZS_LOG(WARNING) << "the key-value store's holder " << i << " ("
                      << one.address
                      << ") is left: it gave no answer while another did ("
                      << s.message() << "); its other holders serve it";
    }
  }
  return out;
}

std::string KvClient::Addresses() const {
  std::vector<std::string> a;
  for (const auto& one : holders_->list) a.push_back(one->address);
  return absl::StrJoin(a, ", ");
}

absl::Status KvClient::Set(const std::string& key, const std::string& value) {
  v1::KvSetRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_run_id(scope_.run_id);
  req.set_attempt(scope_.attempt);
  const Outcome out = OnHolders(
      absl::Now() + control_timeout_, absl::StrCat("KvSet('", key, "')"),
      /*first=*/false, [&](size_t i, grpc::ClientContext* ctx) {
        v1::KvSetResponse resp;
        return holders_->list[i]->stub->KvSet(ctx, req, &resp);
      });
  return out.error;
}

absl::StatusOr<std::string> KvClient::TryGet(const std::string& key) {
  v1::KvGetRequest req;
  req.set_key(key);
  req.set_run_id(scope_.run_id);
  req.set_attempt(scope_.attempt);
  std::vector<v1::KvGetResponse> resp(holders_->list.size());
  const Outcome out = OnHolders(
      absl::Now() + control_timeout_, absl::StrCat("KvGet('", key, "')"),
      /*first=*/false, [&](size_t i, grpc::ClientContext* ctx) {
        return holders_->list[i]->stub->KvGet(ctx, req, &resp[i]);
      });
  if (!out.error.ok()) return out.error;
  // A value any holder has (a replacement's store starts empty).
  for (size_t i = 0; i < resp.size(); ++i) {
    if (out.status[i].has_value() && out.status[i]->ok() && resp[i].found()) {
      return resp[i].value();
    }
  }
  return absl::NotFoundError(
      absl::StrCat("rendezvous key '", key, "' is not set on ", Addresses()));
}

absl::Status KvClient::Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) {
  v1::KvWaitRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_run_id(scope_.run_id);
  req.set_attempt(scope_.attempt);
  const Outcome out =
      OnHolders(absl::Now() + timeout,
                absl::StrCat("KvWait('", absl::StrJoin(keys, "', '"), "')"),
                /*first=*/true, [&](size_t i, grpc::ClientContext* ctx) {
                  v1::KvWaitResponse resp;
                  return holders_->list[i]->stub->KvWait(ctx, req, &resp);
                });
  for (const auto& s : out.status) {
    if (s.has_value() && s->ok()) return absl::OkStatus();
  }
  if (out.error.code() == absl::StatusCode::kDeadlineExceeded ||
      out.error.code() == absl::StatusCode::kCancelled) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous keys '", absl::StrJoin(keys, "', '"), "' not all set on ",
        Addresses(), " within ", absl::FormatDuration(timeout)));
  }
  return out.error;
}

absl::StatusOr<std::string> KvClient::Get(const std::string& key,
                                          absl::Duration timeout) {
  if (absl::Status s = Wait({key}, timeout); !s.ok()) return s;
  return TryGet(key);
}

}  // namespace zeroshard
