#include "tests/client/fake_shard_service.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "wire/grpc_tuning.h"

namespace zeroshard::testing {

float FakeValue(uint64_t offset) {
  return static_cast<float>(offset % 1021) * 0.25f - 100.0f;
}

bool FakeShardService::TakeFault(std::atomic<int>& counter) {
  int n = counter.load();
  while (n > 0) {
    if (counter.compare_exchange_weak(n, n - 1)) return true;
  }
  return false;
}

std::vector<ReceivedPush> FakeShardService::pushes() const {
  absl::MutexLock lock(&mu_);
  return pushes_;
}

std::vector<v1::InitRequest> FakeShardService::inits() const {
  absl::MutexLock lock(&mu_);
  return inits_;
}

grpc::Status FakeShardService::Init(grpc::ServerContext*,
                                    const v1::InitRequest* req,
                                    v1::InitResponse* resp) {
  ++init_calls;
  if (TakeFault(fail_unavailable)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected");
  }
  {
    absl::MutexLock lock(&mu_);
    inits_.push_back(*req);
  }
  resp->set_owned_begin(owned_.begin);
  resp->set_owned_end(misreport_range ? owned_.end + 64 : owned_.end);
  resp->set_total_elems(total_);
  return grpc::Status::OK;
}

grpc::Status FakeShardService::Gather(
    grpc::ServerContext* ctx, const v1::GatherRequest* req,
    grpc::ServerWriter<v1::GatherChunk>* writer) {
  ++gather_calls;
  if (TakeFault(fail_unavailable)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected");
  }
  // A bounded, cancellable delay.
  const absl::Time until = absl::Now() + absl::Milliseconds(gather_delay_ms.load());
  while (absl::Now() < until) {
    if (ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  const bool bf16 = req->dtype() == v1::DTYPE_BF16;
  if (!bf16 && req->dtype() != v1::DTYPE_FP32) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "dtype");
  }
  const size_t esize = bf16 ? 2 : 4;
  const uint64_t per_msg =
      std::max<uint64_t>(1, (req->max_message_bytes() ? req->max_message_bytes()
                                                       : 1 << 20) / esize);
  bool first_chunk = true;
  v1::GatherChunk first_sent;
  for (const v1::FlatRange& r : req->ranges()) {
    const FlatRange fr{r.offset(), r.offset() + r.length()};
    if (!owned_.Contains(fr)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("range outside server ", index_));
    }
    for (uint64_t at = fr.begin; at < fr.end; at += per_msg) {
      const uint64_t n = std::min(per_msg, fr.end - at);
      v1::GatherChunk chunk;
      chunk.set_offset(at);
      chunk.set_dtype(req->dtype());
      chunk.set_version(version);
      std::string data(n * esize, '\0');
      for (uint64_t i = 0; i < n; ++i) {
        const float v = FakeValue(at + i);
        if (bf16) {
          const uint16_t b = FloatToBf16(v);
          std::memcpy(&data[i * 2], &b, 2);
        } else {
          std::memcpy(&data[i * 4], &v, 4);
        }
      }
      chunk.set_data(std::move(data));
      if (first_chunk) {
        first_sent = chunk;
        if (gather_wrapping_offset) chunk.set_offset(~uint64_t{0});
      } else if (gather_duplicate && at + per_msg >= fr.end &&
                 &r == &req->ranges(req->ranges_size() - 1) &&
                 first_sent.data().size() == chunk.data().size()) {
        chunk = first_sent;  // the last piece replaced by the first again
      }
      first_chunk = false;
      if (!writer->Write(chunk)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status FakeShardService::PushGrad(
    grpc::ServerContext* ctx, grpc::ServerReader<v1::PushGradMessage>* reader,
    v1::PushGradResponse* resp) {
  ++push_calls;
  if (TakeFault(fail_unavailable)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected");
  }
  if (abort_pushes) {
    return grpc::Status(grpc::StatusCode::ABORTED, "step is stale (injected)");
  }
  const bool fail_midway = TakeFault(fail_push_midway);
  ReceivedPush push;
  v1::PushGradMessage msg;
  bool have_header = false;
  uint64_t elems = 0;
  while (reader->Read(&msg)) {
    if (msg.has_header()) {
      if (have_header) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "2 headers");
      }
      have_header = true;
      push.header = msg.header();
    } else if (msg.has_piece()) {
      if (!have_header || push.committed) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "order");
      }
      const size_t esize = msg.piece().dtype() == v1::DTYPE_BF16 ? 2 : 4;
      const uint64_t n = msg.piece().data().size() / esize;
      if (!owned_.Contains({msg.piece().offset(), msg.piece().offset() + n})) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("piece outside server ", index_));
      }
      elems += n;
      push.pieces.push_back(msg.piece());
      if (fail_midway && push.pieces.size() == 2) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected midway");
      }
    } else if (msg.has_commit()) {
      if (push.header.coefficient_known() || push.committed) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "commit");
      }
      push.committed = true;
      push.commit = msg.commit();
    }
  }
  if (ctx->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }
  if (!push.header.coefficient_known() && !push.committed) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no commit");
  }
  resp->set_applied_elems(elems);
  absl::MutexLock lock(&mu_);
  pushes_.push_back(std::move(push));
  return grpc::Status::OK;
}

grpc::Status FakeShardService::Inspect(grpc::ServerContext*,
                                       const v1::InspectRequest*,
                                       v1::InspectResponse* resp) {
  if (TakeFault(fail_unavailable)) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected");
  }
  resp->set_initialized(true);
  resp->set_server_index(index_);
  resp->set_owned_begin(owned_.begin);
  resp->set_owned_end(owned_.end);
  resp->set_min_version(version);
  resp->set_max_version(version);
  return grpc::Status::OK;
}

grpc::Status FakeShardService::KvSet(grpc::ServerContext*,
                                     const v1::KvSetRequest* req,
                                     v1::KvSetResponse*) {
  absl::MutexLock lock(&mu_);
  kv_[req->key()] = req->value();
  return grpc::Status::OK;
}

grpc::Status FakeShardService::KvGet(grpc::ServerContext*,
                                     const v1::KvGetRequest* req,
                                     v1::KvGetResponse* resp) {
  absl::MutexLock lock(&mu_);
  auto it = kv_.find(req->key());
  resp->set_found(it != kv_.end());
  if (it != kv_.end()) resp->set_value(it->second);
  return grpc::Status::OK;
}

grpc::Status FakeShardService::KvWait(grpc::ServerContext* ctx,
                                      const v1::KvWaitRequest* req,
                                      v1::KvWaitResponse*) {
  // Polls until every key exists or the client's deadline passes.
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      bool all = true;
      for (const std::string& k : req->keys()) all = all && kv_.count(k) > 0;
      if (all) return grpc::Status::OK;
    }
    if (ctx->IsCancelled() ||
        std::chrono::system_clock::now() > ctx->deadline()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "keys missing");
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

FakeShardCluster::FakeShardCluster(const FlatLayout& layout) {
  for (uint32_t k = 0; k < layout.num_servers(); ++k) {
    services_.push_back(std::make_unique<FakeShardService>(
        k, layout.ServerRange(k), layout.total_elems()));
    grpc::ServerBuilder builder;
    ApplyServerTuning(builder);
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(services_.back().get());
    servers_.push_back(builder.BuildAndStart());
    addresses_.push_back(absl::StrCat("127.0.0.1:", port));
  }
}

FakeShardCluster::~FakeShardCluster() {
  for (auto& s : servers_) {
    s->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

int UnusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  // Kept bound (never listening) for the life of the process: a connect gets
  // ECONNREFUSED, and no other process (tests run in parallel) can take the
  // port meanwhile, as it could once the socket were closed.
  return ntohs(addr.sin_port);
}

}  // namespace zeroshard::testing
