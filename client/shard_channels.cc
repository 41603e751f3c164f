#include "client/shard_channels.h"

#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/piece_plan.h"
#include "wire/grpc_status.h"
#include "wire/grpc_tuning.h"

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
  }
  return c;
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

ShardChannels::~ShardChannels() {
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
  v1::InspectResponse resp;
  absl::Status s = RunWithRetry(options_.retry, [&] {
    grpc::ClientContext ctx;
    PrepareControlContext(&ctx);
    return FromGrpcStatus(stubs_[k]->Inspect(&ctx, v1::InspectRequest(), &resp),
                          "Inspect", addresses_[k]);
  }, channels_[k].get());
  if (!s.ok()) return s;
  return resp;
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
