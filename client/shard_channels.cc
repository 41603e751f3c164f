#include "client/shard_channels.h"

#include <algorithm>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/piece_plan.h"
#include "wire/grpc_status.h"
#include "wire/grpc_tuning.h"
#include "wire/slot_metadata.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::Status RunWithRetry(const RetryPolicy& policy,
                          const std::function<absl::Status()>& call,
                          grpc::Channel* channel) {
  const absl::Time start = absl::Now();
  std::mt19937_64 rng(std::random_device{}());
  for (int attempt = 0;; ++attempt) {
    absl::Status s = call();
    if (!ShouldRetry(policy, s, attempt, absl::Now() - start)) {
      if (!s.ok() && IsRetryableCode(s.code()) && attempt > 0) {
        return absl::Status(s.code(), absl::StrCat(s.message(), " (after ",
                                                   attempt + 1, " attempts)"));
      }
      return s;
    }
    const absl::Time retry_at =
        absl::Now() + BackoffDelay(policy, attempt, rng());
    if (channel != nullptr) {
      channel->WaitForConnected(absl::ToChronoTime(retry_at));
    }
    absl::SleepFor(retry_at - absl::Now());
  }
}

absl::StatusOr<std::shared_ptr<const ClientSecurity>> LoadClientCredentials(
    const std::string& dir, const std::string& role_name) {
  if (dir.empty()) return nullptr;
  absl::StatusOr<Role> role = ParseRole(role_name);
  if (!role.ok()) return role.status();
  return ClientSecurity::Load(dir, *role);
}

absl::StatusOr<std::vector<std::string>> ParseServerList(
    const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view s : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    const size_t colon = s.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(s.substr(colon + 1), &port) || port <= 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("server address '", s, "' is not HOST:PORT"));
    }
    out.emplace_back(s);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("the server list is empty");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ShardChannels>> ShardChannels::Connect(
    const std::vector<std::string>& servers, ShardClientOptions options) {
  if (servers.empty()) {
    return absl::InvalidArgumentError("ShardChannels: no servers given");
  }
  for (const std::string& s : servers) {
    auto parsed = ParseServerList(s);
    if (!parsed.ok()) return parsed.status();
  }
  if (options.max_message_bytes == 0 ||
      options.max_message_bytes > kMaxClientPieceBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes ", options.max_message_bytes, " not in [1, 1 MiB]"));
  }
  if (options.retry.max_attempts < 1) {
    return absl::InvalidArgumentError("retry.max_attempts must be >= 1");
  }
  if (options.silence_probe <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "silence_probe ", absl::FormatDuration(options.silence_probe),
        " must be > 0"));
  }
  if (options.replicas < 1 || options.replicas > 2 ||
      (options.replicas == 2 && servers.size() < 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicas ", options.replicas, " with ", servers.size(),
        " servers: it must be 1, or 2 with at least 2 servers"));
  }
  std::unique_ptr<ShardChannels> c(new ShardChannels());
  c->options_ = options;
  for (const std::string& s : servers) {
    grpc::ChannelArguments args = TunedChannelArguments();
    // A restarted server should be found again quickly: short backoff
    // between connection attempts. gRPC 1.51 reads
    // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as the time one attempt (TCP, TLS
    // handshake, HTTP/2 SETTINGS) may take, not as a backoff: at 100 ms, 64
    // clients connecting over TLS at once on 2 cores failed UNAVAILABLE
    // "timed out before receiving SETTINGS frame" (integration_load_test).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectAttemptMs);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    auto channel = CreateClientChannel(s, args, options.security);
    c->addresses_.push_back(s);
    c->stubs_.push_back(v1::ShardService::NewStub(channel));
    c->health_stubs_.push_back(grpc::health::v1::Health::NewStub(channel));
    c->channels_.push_back(std::move(channel));
    c->down_.push_back(std::make_unique<std::atomic<bool>>(false));
    c->silent_.push_back(std::make_unique<std::atomic<bool>>(false));
    c->leaving_.push_back(std::make_unique<CallCanceller>());
  }
  if (c->replicas() > 1) c->watch_ = std::thread([p = c.get()] {
    p->WatchForSilence();
  });
  return c;
}

std::vector<int> ShardChannels::LiveHolders(int slot) const {
  std::vector<int> out;
  for (int i = 0; i < replicas(); ++i) {
    const int k = (slot + i) % size();
    if (!IsDown(k)) out.push_back(k);
  }
  return out;
}

void ShardChannels::MarkDown(int k, const absl::Status& why) const {
  if (replicas() < 2) return;
  // Its shared-memory region went with it: calls after MarkUp go over gRPC
  // until the caller opens another. Its id is kept, to be closed should
  // the same server answer again (TakeStaleRegions).
  std::shared_ptr<const ServerRegion> dropped;
  {
    absl::MutexLock lock(&regions_mu_);
    if (static_cast<size_t>(k) < regions_.size()) {
      dropped = std::move(regions_[k]);
    }
    if (dropped != nullptr) {
      if (stale_regions_.size() < static_cast<size_t>(size())) {
        stale_regions_.resize(size());
      }
      stale_regions_[k].push_back(dropped->id());
    }
  }
  dropped.reset();  // unmapped once no call uses it
  // Down before its calls are cancelled, so that each of them, ending
  // CANCELLED, finds its server left and goes on with the other copy.
  const bool was_down = down_[k]->exchange(true);
  leaving_[k]->Cancel();
  if (!was_down) {
    ZS_LOG(WARNING) << "server " << k << " (" << address(k)
                    << ") is gone; its slots are served by their other copy: "
                    << why.message();
  }
}

void ShardChannels::MarkUp(int k) const {
  silent_[k]->store(false);
  leaving_[k]->Reset();
  if (down_[k]->exchange(false)) {
    ZS_LOG(INFO) << "server " << k << " (" << address(k)
                 << ") holds its copies again";
  }
}

std::vector<int> ShardChannels::DownServers() const {
  std::vector<int> out;
  for (int k = 0; k < size(); ++k) {
    if (IsDown(k)) out.push_back(k);
  }
  return out;
}

void ShardChannels::RouteTo(grpc::ClientContext* ctx, int slot,
                            int server) const {
  if (slot != server) SetSlotMetadata(ctx, static_cast<uint32_t>(slot));
  if (replicas() > 1) SetCopiesMetadata(ctx, static_cast<uint32_t>(replicas()));
}

bool CopyLost(const absl::Status& s) {
  // Its server does not answer, or answers without state: a process
  // started in its place, whose copy is not the one this client wrote.
  return s.code() == absl::StatusCode::kUnavailable ||
         (s.code() == absl::StatusCode::kFailedPrecondition &&
          absl::StrContains(s.message(), kNotInitialisedMessage));
}

absl::StatusOr<bool> ShardChannels::Answers(int k, absl::Duration within) const {
  // The health service: answered by the server's own gRPC threads with no
  // state to look at, so asking often costs nothing.
  grpc::health::v1::HealthCheckResponse r;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + within));
  const absl::Status s = FromGrpcStatus(
      health_stubs_[k]->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &r),
      "Health.Check", addresses_[k]);
  if (s.ok()) return true;
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) return false;
  return s;
}

bool ShardChannels::SilentWhileOthersAnswer(int k) const {
  const absl::StatusOr<bool> answers = Answers(k, options_.silence_probe);
  if (!answers.ok() || *answers) return false;
  // Silent: is it the server, or this client cut off from every server (its
  // own link down)? Only the first is a lost copy; leaving every server
  // would end the run where waiting for the link goes on.
  for (int j = 0; j < size(); ++j) {
    if (j == k || IsDown(j)) continue;
    const absl::StatusOr<bool> other = Answers(j, options_.silence_probe);
    if (!other.ok() || *other) return true;
  }
  return false;
}

bool ShardChannels::LostCopy(int k, const absl::Status& s) const {
  if (CopyLost(s)) return true;
  // DEADLINE_EXCEEDED alone is not a lost copy: waits end so too (a Gather
  // for a version not applied yet, a checkpoint still being written). The
  // server is asked once, briefly: one that answers stands; one that does
  // not (partitioned, hung) is lost as a dead one is.
  // A verdict of silence holds until MarkUp, so that a push stream's error
  // looked at during backward and again at its reply asks once.
  if (replicas() < 2 || !absl::IsDeadlineExceeded(s)) return false;
  if (silent_[k]->load()) return true;
  if (!SilentWhileOthersAnswer(k)) return false;
  if (!silent_[k]->exchange(true)) {
    ZS_LOG(WARNING) << "server " << k << " (" << address(k)
                    << ") did not answer within "
                    << absl::FormatDuration(options_.silence_probe)
                    << " after a call ran out its deadline: " << s.message();
  }
  return true;
}

namespace {

absl::Status NoCopyLeft(const ShardChannels& channels, int slot,
                        const absl::Status& last) {
  return absl::UnavailableError(absl::StrCat(
      "every copy of slot ", slot, " is gone (servers ", slot, " and ",
      (slot + 1) % channels.size(), ")",
      last.ok() ? "" : absl::StrCat("; the last: ", last.message()),
      "; the run can only go on from its newest checkpoint"));
}

}  // namespace

absl::Status ShardChannels::OnEveryCopy(
    int slot, const std::function<absl::Status(int)>& call) const {
  if (replicas() < 2) return call(slot);
  const std::vector<int> holders = LiveHolders(slot);
  std::vector<CopyResult> results(holders.size());
  RunInParallel(static_cast<int>(holders.size()), [&](int i) {
    results[i] = {holders[i], call(holders[i])};
    return absl::OkStatus();
  }).IgnoreError();
  return SettleCopies(slot, results);
}

bool ShardChannels::OthersHoldItsSlots(int k) const {
  // Server k holds slot k and the copy of slot k - 1.
  for (int slot : {k, (k + size() - 1) % size()}) {
    const std::vector<int> live = LiveHolders(slot);
    if (std::none_of(live.begin(), live.end(),
                     [k](int h) { return h != k; })) {
      return false;
    }
  }
  return true;
}

void ShardChannels::WatchForSilence() {
  absl::MutexLock lock(&watch_mu_);
  while (!watch_stop_) {
    watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stop_), kWatchEvery);
    if (watch_stop_) break;
    for (int k = 0; k < size() && !watch_stop_; ++k) {
      // A server whose slots have no other live copy is never left: only
      // waiting for it can save the step.
      if (IsDown(k) || !OthersHoldItsSlots(k) ||
          absl::Now() - leaving_[k]->OldestCall() < kLagBeforeProbe) {
        continue;
      }
      // A call has waited on server k for a while: a wait for a version,
      // a slow step, or a server that will never answer. Asked once, with
      // the lock released so that the destructor is not held by it.
      watch_mu_.Unlock();
      if (SilentWhileOthersAnswer(k)) {
        MarkDown(k, absl::UnavailableError(absl::StrCat(
                        "a call waited over ",
                        absl::FormatDuration(kLagBeforeProbe),
                        " and it then did not answer within ",
                        absl::FormatDuration(options_.silence_probe))));
      }
      watch_mu_.Lock();
    }
  }
}

absl::Status ShardChannels::SettleCopies(int slot,
                                         absl::Span<const CopyResult> results,
                                         bool mark_down) const {
  if (replicas() < 2) {
    return results.empty() ? absl::OkStatus() : results.front().status;
  }
  int served = 0;
  absl::Status first_error, last_lost;
  for (const CopyResult& r : results) {
    if (r.status.ok()) {
      ++served;
    } else if (IsDown(r.server) || LostCopy(r.server, r.status)) {
      if (mark_down) MarkDown(r.server, r.status);
      last_lost = r.status;
    } else if (first_error.ok()) {
      first_error = r.status;
    }
  }
  if (!first_error.ok()) return first_error;
  if (served == 0) return NoCopyLeft(*this, slot, last_lost);
  return absl::OkStatus();
}

absl::Status ShardChannels::OnOneCopy(
    int slot, const std::function<absl::Status(int)>& call) const {
  if (replicas() < 2) return call(slot);
  absl::Status last_lost;
  for (int k : LiveHolders(slot)) {
    absl::Status s = call(k);
    if (s.ok() || (!IsDown(k) && !LostCopy(k, s))) return s;
    MarkDown(k, s);
    last_lost = s;
  }
  return NoCopyLeft(*this, slot, last_lost);
}

bool ShardChannels::WaitForConnected(int k, absl::Time deadline) const {
  return channels_[k]->WaitForConnected(absl::ToChronoTime(deadline));
}

std::shared_ptr<const ServerRegion> ShardChannels::region(int k) const {
  absl::MutexLock lock(&regions_mu_);
  return k >= 0 && static_cast<size_t>(k) < regions_.size() ? regions_[k]
                                                            : nullptr;
}

void ShardChannels::SetRegion(int k,
                              std::shared_ptr<const ServerRegion> region) {
  std::shared_ptr<const ServerRegion> old;
  {
    absl::MutexLock lock(&regions_mu_);
    if (regions_.size() < static_cast<size_t>(size())) regions_.resize(size());
    old = std::move(regions_[k]);
    regions_[k] = std::move(region);
  }
  if (old != nullptr) old->Close(*this, k);
}

std::vector<uint64_t> ShardChannels::TakeStaleRegions(int k) const {
  std::vector<uint64_t> ids;
  absl::MutexLock lock(&regions_mu_);
  if (k >= 0 && static_cast<size_t>(k) < stale_regions_.size()) {
    ids.swap(stale_regions_[k]);
  }
  return ids;
}

ShardChannels::~ShardChannels() {
  if (watch_.joinable()) {
    {
      absl::MutexLock lock(&watch_mu_);
      watch_stop_ = true;
    }
    watch_.join();
  }
  std::vector<std::shared_ptr<const ServerRegion>> regions;
  {
    absl::MutexLock lock(&regions_mu_);
    regions.swap(regions_);
  }
  for (size_t k = 0; k < regions.size(); ++k) {
    if (regions[k] != nullptr) regions[k]->Close(*this, static_cast<int>(k));
  }
}

void ShardChannels::PrepareControlContext(grpc::ClientContext* ctx) const {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + options_.control_timeout));
}

absl::StatusOr<v1::InspectResponse> ShardChannels::Inspect(int k) const {
  return InspectCopy(k, k);
}

absl::StatusOr<v1::InspectResponse> ShardChannels::InspectCopy(
    int slot, int k, bool digest) const {
  v1::InspectResponse resp;
  v1::InspectRequest request;
  request.set_state_digest(digest);
  absl::Status s = RunWithRetry(options_.retry, [&] {
    grpc::ClientContext ctx;
    PrepareControlContext(&ctx);
    RouteTo(&ctx, slot, k);
    // Ended when server k is left meanwhile (a comparison started before a
    // hung server was found must not hold the step for the control
    // deadline).
    const ScopedCall until_left(leaving(k), &ctx);
    if (!until_left.registered()) {
      return absl::CancelledError(absl::StrCat(
          "Inspect of slot ", slot, ": server ", k, " (", addresses_[k],
          ") was left"));
    }
    return FromGrpcStatus(stubs_[k]->Inspect(&ctx, request, &resp), "Inspect",
                          addresses_[k]);
  }, channels_[k].get());
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<std::vector<ShardChannels::LiveCopy>>
ShardChannels::InspectLiveCopies(int slot, bool digest) const {
  std::vector<LiveCopy> copies;
  for (int k : LiveHolders(slot)) {
    absl::StatusOr<v1::InspectResponse> r = InspectCopy(slot, k, digest);
    if (!r.ok() && (IsDown(k) || LostCopy(k, r.status()))) {
      MarkDown(k, r.status());
      continue;
    }
    RETURN_IF_ERROR(r.status());
    if (!r->initialized()) {
      // Inspect answers a server without state instead of refusing it: a
      // process started in the place of one that died since the last call,
      // whose copy is lost, not different.
      MarkDown(k, absl::FailedPreconditionError(absl::StrCat(
                      "Inspect of slot ", slot, " at ", address(k), ": ",
                      kNotInitialisedMessage)));
      continue;
    }
    copies.push_back({k, *std::move(r)});
  }
  return copies;
}

absl::Status ShardChannels::CheckCopiesAgree() const {
  if (replicas() < 2) return absl::OkStatus();
  return RunInParallel(size(), [&](int slot) -> absl::Status {
    ASSIGN_OR_RETURN(const std::vector<LiveCopy> copies,
                     InspectLiveCopies(slot, /*digest=*/true));
    for (size_t i = 1; i < copies.size(); ++i) {
      const LiveCopy& a = copies[0];
      const LiveCopy& b = copies[i];
      if (a.r.state_digest_version() == b.r.state_digest_version() &&
          a.r.state_digest() == b.r.state_digest()) {
        continue;
      }
      return absl::DataLossError(absl::StrFormat(
          "the two copies of slot %d (flat [%d, %d)) differ: server %d (%s) "
          "holds step %d with state digest %016x, server %d (%s) step %d "
          "with %016x; a copy that diverged cannot stand in for the other, "
          "so the run stops here (restore from a checkpoint)",
          slot, a.r.owned_begin(), a.r.owned_end(), a.server,
          address(a.server), a.r.state_digest_version(), a.r.state_digest(),
          b.server, address(b.server), b.r.state_digest_version(),
          b.r.state_digest()));
    }
    return absl::OkStatus();
  });
}

absl::Status ShardChannels::LeaveStaleCopies() const {
  if (replicas() < 2) return absl::OkStatus();
  return RunInParallel(size(), [&](int slot) -> absl::Status {
    ASSIGN_OR_RETURN(const std::vector<LiveCopy> copies,
                     InspectLiveCopies(slot, /*digest=*/false));
    uint64_t newest = 0;
    for (const LiveCopy& c : copies) newest = std::max(newest, c.r.max_version());
    for (const LiveCopy& c : copies) {
      if (c.r.max_version() >= newest) continue;
      MarkDown(c.server, absl::FailedPreconditionError(absl::StrCat(
                             "its copy of slot ", slot, " stands at step ",
                             c.r.max_version(), ", the other at ", newest,
                             " (a server the workers left and have not "
                             "restored)")));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::InspectResponse> ShardChannels::InspectSlot(
    int slot) const {
  v1::InspectResponse out;
  RETURN_IF_ERROR(OnOneCopy(slot, [&](int k) {
    ASSIGN_OR_RETURN(out, InspectCopy(slot, k));
    return absl::OkStatus();
  }));
  return out;
}

std::vector<absl::StatusOr<v1::InspectResponse>> ShardChannels::InspectAll()
    const {
  std::vector<absl::StatusOr<v1::InspectResponse>> out(
      size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int k = 0; k < size(); ++k) {
    threads.emplace_back([&, k] { out[k] = Inspect(k); });
  }
  for (auto& t : threads) t.join();
  return out;
}

absl::StatusOr<std::string> ShardChannels::Health(int k) const {
  grpc::health::v1::HealthCheckResponse resp;
  absl::Status s = RunWithRetry(options_.retry, [&] {
    grpc::ClientContext ctx;
    PrepareControlContext(&ctx);
    return FromGrpcStatus(
        health_stubs_[k]->Check(&ctx, grpc::health::v1::HealthCheckRequest(),
                                &resp),
        "Health.Check", addresses_[k]);
  }, channels_[k].get());
  if (!s.ok()) return s;
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
      resp.status());
}

std::vector<absl::StatusOr<std::string>> ShardChannels::HealthAll() const {
  std::vector<absl::StatusOr<std::string>> out(size(),
                                               absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int k = 0; k < size(); ++k) {
    threads.emplace_back([&, k] { out[k] = Health(k); });
  }
  for (auto& t : threads) t.join();
  return out;
}

absl::Status RunInParallel(int n,
                           const std::function<absl::Status(int)>& call) {
  std::vector<absl::Status> out(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { out[i] = call(i); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : out) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
