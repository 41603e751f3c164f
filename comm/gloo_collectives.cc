#include "comm/gloo_collectives.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <exception>
#include <mutex>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "comm/advertised_address.h"
#include "comm/gloo_store.h"

namespace zeroshard {
namespace {

// The largest broadcast payload (WorkerGroup::kMaxBroadcastBytes) is also
// the marker a root sends when its payload is too long, so the receivers
// fail with it instead of waiting.
constexpr uint64_t kBroadcastTooLong = ~uint64_t{0};

// Gloo writes to its peers' sockets with writev, which raises SIGPIPE when a
// peer has gone away; under the default disposition that kills the whole
// process instead of failing the collective with an error naming the peer.
// The first group a process creates therefore ignores SIGPIPE, unless the
// host has installed a disposition of its own (Python ignores it already).
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL && !(current.sa_flags & SA_SIGINFO)) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

std::chrono::milliseconds Remaining(absl::Time deadline) {
  // Rounded up, so that Gloo's timer cannot fire before `deadline` (it did,
  // by under a millisecond, when this truncated). Gloo treats 0 as "no
  // timeout": never pass less than 1 ms.
  const absl::Duration left =
      absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1));
  return std::max(std::chrono::milliseconds(1),
                  absl::ToChronoMilliseconds(left));
}

// Whether a Gloo exception is its wait timing out (rather than a broken
// connection): our deadline has passed, or Gloo says so.
bool TimedOut(const std::exception& e, absl::Time deadline) {
  return absl::Now() >= deadline ||
         absl::StrContains(e.what(), "Timed out waiting");
}

template <typename T, typename U>
void ReduceInto(T* acc, const T* in, size_t n, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case ReduceOp::kSum:
        // Unsigned arithmetic for integers: wrap-around, never UB.
        acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(in[i]));
        break;
      case ReduceOp::kMax:
        acc[i] = std::max(acc[i], in[i]);
        break;
      case ReduceOp::kMin:
        acc[i] = std::min(acc[i], in[i]);
        break;
    }
  }
}

// dst = (a + b) * scale, element-wise; the compiler vectorises this loop.
void AddScaled(float* dst, const float* a, const float* b, size_t n,
               float scale) {
  if (scale == 1.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = (a[i] + b[i]) * scale;
  }
}

// Publishes the address this rank advertises (numeric, as Gloo resolves
// it) and checks the peers' before Gloo connects: a loopback address
// offered to a peer on another host fails here, at once, instead of in
// Gloo's connect timeout (comm/advertised_address.h).
absl::Status ExchangeAddresses(int rank, int size, RendezvousStore* store,
                               const GroupOptions& options) {
  ASSIGN_OR_RETURN(const std::string mine,
                   ResolveHost(options.hostname, options.join_timeout()));
  std::vector<std::string> all(size);
  try {
    GlooRendezvousStore addr_store(
        store, absl::StrCat("zs/comm/", options.group, "/addr/"),
        options.group, options.join_timeout());
    addr_store.set(std::to_string(rank),
                   std::vector<char>(mine.begin(), mine.end()));
    std::vector<std::string> keys;
    for (int q = 0; q < size; ++q) keys.push_back(std::to_string(q));
    addr_store.wait(keys);
    for (int q = 0; q < size; ++q) {
      const std::vector<char> v = addr_store.get(keys[q]);
      all[q].assign(v.begin(), v.end());
    }
  } catch (const RendezvousFailure& e) {
    return e.status();
  }
  return CheckPeerAddresses(rank, all);
}

}  // namespace

GlooWorkerGroup::GlooWorkerGroup(int rank, int size,
                                 const GroupOptions& options)
    : rank_(rank),
      size_(size),
      group_(options.group),
      timeout_(options.timeout) {}

GlooWorkerGroup::~GlooWorkerGroup() {
  // Pairs close their sockets; peers still waiting on us see the connection
  // end (UNAVAILABLE) rather than waiting for their timeout.
  context_.reset();
  device_.reset();
}

absl::StatusOr<std::unique_ptr<GlooWorkerGroup>> GlooWorkerGroup::Create(
    int rank, int size, RendezvousStore* store, const GroupOptions& options) {
  RETURN_IF_ERROR(ValidateGroupShape(rank, size));
  if (store == nullptr) {
    return absl::InvalidArgumentError("worker group needs a rendezvous store");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("worker group timeout must be positive");
  }
  std::unique_ptr<GlooWorkerGroup> group(
      new GlooWorkerGroup(rank, size, options));
  if (size == 1) return group;  // Every collective is local.
  IgnoreSigpipeUnlessHandled();

  const std::string where =
      absl::StrCat("worker group '", options.group, "' (rank ", rank, " of ",
                   size, ")");
  if (options.interface.empty()) {
    RETURN_IF_ERROR(ExchangeAddresses(rank, size, store, options));
  }
  // Gloo's full-mesh connect occasionally fails on a loaded machine
  // ("connection closed by peer", "connect timeout") on some ranks while
  // others succeed. Every rank therefore votes on each attempt through the
  // store, and all ranks retry together with fresh devices and keys until an
  // attempt succeeds everywhere.
  constexpr int kAttempts = 3;
  absl::Status last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const std::string prefix =
        absl::StrCat("zs/comm/", options.group, "/a", attempt, "/");
    absl::Status connected;
    try {
      gloo::transport::tcp::attr attr;
      if (!options.interface.empty()) {
        attr.iface = options.interface;
      } else {
        attr.hostname = options.hostname;
      }
      group->device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(absl::ToChronoMilliseconds(options.join_timeout()));
      GlooRendezvousStore gloo_store(store, prefix, options.group,
                                     options.join_timeout());
      context->connectFullMesh(gloo_store, group->device_);
      // The collectives' own bound from here on.
      context->setTimeout(absl::ToChronoMilliseconds(options.timeout));
      group->context_ = std::move(context);
    } catch (const RendezvousFailure& e) {
      return e.status();  // a rank never arrived: retrying will not help
    } catch (const std::exception& e) {
      connected = absl::UnavailableError(
          absl::StrCat("connecting ", where, ": ", e.what()));
    }
    RETURN_IF_ERROR(store->Set(absl::StrCat(prefix, "vote/", rank),
                               connected.ok() ? "ok" : "fail"));
    bool all_ok = true;
    for (int q = 0; q < size; ++q) {
      ASSIGN_OR_RETURN(std::string vote,
                       store->Get(absl::StrCat(prefix, "vote/", q),
                                  options.join_timeout()));
      all_ok = all_ok && vote == "ok";
    }
    if (all_ok) {
      ZS_LOG(INFO) << "connected " << where << " over gloo/tcp"
                   << (attempt > 0 ? absl::StrCat(" (attempt ", attempt + 1, ")")
                                   : "");
      return group;
    }
    last = connected.ok()
               ? absl::UnavailableError(absl::StrCat(
                     "connecting ", where, ": a peer failed to connect"))
               : connected;
    ZS_LOG(WARNING) << last.message() << "; retrying (attempt "
                    << attempt + 2 << " of " << kAttempts << ")";
    group->context_.reset();
    group->device_.reset();
  }
  return last;
}

std::unique_ptr<gloo::transport::UnboundBuffer> GlooWorkerGroup::Buffer(
    const void* ptr, size_t bytes) {
  // Gloo's buffers are not const-typed; sends only read them.
  return context_->createUnboundBuffer(const_cast<void*>(ptr), bytes);
}

absl::Status GlooWorkerGroup::Run(
    const char* op, const std::function<absl::Status(absl::Time)>& body) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, " on broken worker group '", group_, "': ", broken_.message()));
  }
  absl::Status status;
  try {
    status = body(absl::Now() + timeout_);
  } catch (const std::exception& e) {
    status = absl::UnavailableError(absl::StrCat(
        op, " in worker group '", group_, "' (rank ", rank_, "): ", e.what()));
  }
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) {
    broken_ = status;
    // Abandoned receives must never land later: drop the connections.
    try {
      if (context_ != nullptr) context_->closeConnections();
    } catch (const std::exception& e) {
      ZS_LOG(WARNING) << "closing worker group connections: " << e.what();
    }
  }
  return status;
}

absl::Status GlooWorkerGroup::WaitRecv(gloo::transport::UnboundBuffer& buf,
                                       int peer, absl::Time deadline,
                                       const char* op) {
  try {
    if (buf.waitRecv(nullptr, Remaining(deadline))) return absl::OkStatus();
  } catch (const std::exception& e) {
    if (TimedOut(e, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          op, " in worker group '", group_, "' (rank ", rank_,
          "): no data from rank ", peer, " within ",
          absl::FormatDuration(timeout_)));
    }
    return absl::UnavailableError(
        absl::StrCat(op, " in worker group '", group_, "' (rank ", rank_,
                     "): connection to rank ", peer, " failed: ", e.what()));
  }
  return absl::UnavailableError(absl::StrCat(
      op, " in worker group '", group_, "': receive from rank ", peer,
      " aborted"));
}

absl::Status GlooWorkerGroup::WaitSend(gloo::transport::UnboundBuffer& buf,
                                       int peer, absl::Time deadline,
                                       const char* op) {
  try {
    if (buf.waitSend(nullptr, Remaining(deadline))) return absl::OkStatus();
  } catch (const std::exception& e) {
    if (TimedOut(e, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          op, " in worker group '", group_, "' (rank ", rank_, "): rank ",
          peer, " did not take our data within ",
          absl::FormatDuration(timeout_)));
    }
    return absl::UnavailableError(
        absl::StrCat(op, " in worker group '", group_, "' (rank ", rank_,
                     "): connection to rank ", peer, " failed: ", e.what()));
  }
  return absl::UnavailableError(absl::StrCat(
      op, " in worker group '", group_, "': send to rank ", peer, " aborted"));
}

absl::Status GlooWorkerGroup::Post(bool send,
                                   gloo::transport::UnboundBuffer& buf,
                                   int peer, uint64_t slot, const char* op) {
  try {
    if (send) {
      buf.send(peer, slot);
    } else {
      buf.recv(peer, slot);
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(op, " in worker group '", group_, "' (rank ", rank_,
                     "): connection to rank ", peer, " failed: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status GlooWorkerGroup::RingAllGather(uint8_t* out, size_t part,
                                            absl::Time deadline,
                                            const char* op) {
  if (size_ == 1 || part == 0) return absl::OkStatus();
  const uint64_t slot = context_->nextSlot();
  for (int s = 0; s < size_ - 1; ++s) {
    const int send_part = (rank_ - s + size_) % size_;
    const int recv_part = (rank_ - s - 1 + size_) % size_;
    auto recv = Buffer(out + recv_part * part, part);
    auto send = Buffer(out + send_part * part, part);
    RETURN_IF_ERROR(Post(false, *recv, left(), slot, op));
    RETURN_IF_ERROR(Post(true, *send, right(), slot, op));
    RETURN_IF_ERROR(WaitRecv(*recv, left(), deadline, op));
    RETURN_IF_ERROR(WaitSend(*send, right(), deadline, op));
  }
  return absl::OkStatus();
}

absl::Status GlooWorkerGroup::AllGather(absl::Span<const uint8_t> local,
                                        absl::Span<uint8_t> out) {
  RETURN_IF_ERROR(ValidateAllGather(size_, local.size(), out.size()));
  uint8_t* mine = out.data() + rank_ * local.size();
  if (local.data() != mine && !local.empty()) {
    if (local.data() < out.data() + out.size() &&
        out.data() < local.data() + local.size()) {
      return absl::InvalidArgumentError(
          "all-gather: local buffer overlaps the output other than at this "
          "rank's slot");
    }
    std::memcpy(mine, local.data(), local.size());
  }
  return AllGatherInPlace(out);
}

absl::Status GlooWorkerGroup::AllGatherInPlace(absl::Span<uint8_t> out) {
  if (out.size() % size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-gather: output of ", out.size(),
        " bytes does not split into ", size_, " equal parts"));
  }
  return Run("all-gather", [&](absl::Time deadline) {
    return RingAllGather(out.data(), out.size() / size_, deadline,
                         "all-gather");
  });
}

absl::Status GlooWorkerGroup::ReduceScatter(absl::Span<const float> in,
                                            absl::Span<float> out,
                                            float scale) {
  RETURN_IF_ERROR(ValidateReduceScatter(size_, in.size(), out.size(), scale));
  const size_t part = out.size();
  if (part > 0 && in.data() < out.data() + part &&
      out.data() < in.data() + in.size()) {
    return absl::InvalidArgumentError(
        "reduce-scatter: input and output overlap");
  }
  if (size_ == 1) {
    for (size_t i = 0; i < part; ++i) out[i] = in[i] * scale;
    return absl::OkStatus();
  }
  if (part == 0) return absl::OkStatus();
  return Run("reduce-scatter", [&](absl::Time deadline) -> absl::Status {
    const char* op = "reduce-scatter";
    for (auto& v : sum_) v.resize(std::max(v.size(), part));
    recv_.resize(std::max(recv_.size(), part));
    const size_t seg = segment_floats_;
    const size_t nseg = (part + seg - 1) / seg;
    const uint64_t slot = context_->nextSlot();
    // Step s: send the running sum of part (r-s-1), receive the left
    // neighbour's running sum of part (r-s-2) and add ours to it. After N-1
    // steps the part received is part r, summed over all ranks.
    for (int s = 0; s < size_ - 1; ++s) {
      const size_t send_part = (rank_ - s - 1 + 2 * size_) % size_;
      const size_t recv_part = (rank_ - s - 2 + 2 * size_) % size_;
      const float* src = s == 0 ? in.data() + send_part * part
                                : sum_[(s - 1) % 2].data();
      const bool last = s == size_ - 2;
      float* dst = last ? out.data() : sum_[s % 2].data();
      const float* mine = in.data() + recv_part * part;
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recvs, sends;
      for (size_t k = 0; k < nseg; ++k) {
        const size_t n = std::min(seg, part - k * seg);
        recvs.push_back(Buffer(recv_.data() + k * seg, n * sizeof(float)));
        RETURN_IF_ERROR(Post(false, *recvs.back(), left(), slot, op));
      }
      for (size_t k = 0; k < nseg; ++k) {
        const size_t n = std::min(seg, part - k * seg);
        sends.push_back(Buffer(src + k * seg, n * sizeof(float)));
        RETURN_IF_ERROR(Post(true, *sends.back(), right(), slot, op));
      }
      for (size_t k = 0; k < nseg; ++k) {
        const size_t n = std::min(seg, part - k * seg);
        RETURN_IF_ERROR(WaitRecv(*recvs[k], left(), deadline, op));
        AddScaled(dst + k * seg, recv_.data() + k * seg, mine + k * seg, n,
                  last ? scale : 1.0f);
      }
      // The next step overwrites what this step sent from.
      for (auto& send : sends) {
        RETURN_IF_ERROR(WaitSend(*send, right(), deadline, op));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status GlooWorkerGroup::AllReduceHost(ReduceType type, void* values,
                                            size_t count, ReduceOp op) {
  const size_t bytes = count * ReduceTypeBytes(type);
  if (bytes > (size_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce is for small vectors: ", bytes, " bytes > 16 MiB"));
  }
  if (size_ == 1 || count == 0) return absl::OkStatus();
  std::vector<uint8_t> all(bytes * size_);
  std::memcpy(all.data() + rank_ * bytes, values, bytes);
  RETURN_IF_ERROR(Run("all-reduce", [&](absl::Time deadline) {
    return RingAllGather(all.data(), bytes, deadline, "all-reduce");
  }));
  // Reduce in rank order from rank 0's values: the same bits on every rank.
  std::memcpy(values, all.data(), bytes);
  for (int q = 1; q < size_; ++q) {
    const uint8_t* in = all.data() + q * bytes;
    switch (type) {
      case ReduceType::kF32:
        ReduceInto<float, float>(static_cast<float*>(values),
                                 reinterpret_cast<const float*>(in), count, op);
        break;
      case ReduceType::kF64:
        ReduceInto<double, double>(static_cast<double*>(values),
                                   reinterpret_cast<const double*>(in), count,
                                   op);
        break;
      case ReduceType::kI64:
        ReduceInto<int64_t, uint64_t>(static_cast<int64_t*>(values),
                                      reinterpret_cast<const int64_t*>(in),
                                      count, op);
        break;
      case ReduceType::kU64:
        ReduceInto<uint64_t, uint64_t>(static_cast<uint64_t*>(values),
                                       reinterpret_cast<const uint64_t*>(in),
                                       count, op);
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status GlooWorkerGroup::Broadcast(std::string* bytes, int root) {
  if (bytes == nullptr) {
    return absl::InvalidArgumentError("broadcast: null string");
  }
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast: root ", root, " out of range for group size ", size_));
  }
  if (size_ == 1) {
    if (bytes->size() > kMaxBroadcastBytes) {
      return absl::InvalidArgumentError("broadcast: payload over 64 MiB");
    }
    return absl::OkStatus();
  }
  bool too_long = false;
  absl::Status status = Run("broadcast", [&](absl::Time deadline) -> absl::Status {
    const char* op = "broadcast";
    const uint64_t slot = context_->nextSlot();
    if (rank_ == root) {
      uint64_t length = bytes->size();
      too_long = length > kMaxBroadcastBytes;
      if (too_long) length = kBroadcastTooLong;
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends;
      for (int q = 0; q < size_; ++q) {
        if (q == root) continue;
        auto len = Buffer(&length, sizeof(length));
        RETURN_IF_ERROR(Post(true, *len, q, slot, op));
        RETURN_IF_ERROR(WaitSend(*len, q, deadline, op));
        if (too_long || bytes->empty()) continue;
        sends.push_back(Buffer(bytes->data(), bytes->size()));
        RETURN_IF_ERROR(Post(true, *sends.back(), q, slot, op));
      }
      for (size_t i = 0, q = 0; i < sends.size(); ++q) {
        if (static_cast<int>(q) == root) continue;
        RETURN_IF_ERROR(WaitSend(*sends[i++], q, deadline, op));
      }
      return absl::OkStatus();
    }
    uint64_t length = 0;
    auto len = Buffer(&length, sizeof(length));
    RETURN_IF_ERROR(Post(false, *len, root, slot, op));
    RETURN_IF_ERROR(WaitRecv(*len, root, deadline, op));
    if (length > kMaxBroadcastBytes) {
      too_long = true;
      return absl::OkStatus();
    }
    bytes->resize(length);
    if (length == 0) return absl::OkStatus();
    auto payload = Buffer(bytes->data(), length);
    RETURN_IF_ERROR(Post(false, *payload, root, slot, op));
    return WaitRecv(*payload, root, deadline, op);
  });
  RETURN_IF_ERROR(status);
  if (too_long) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast: rank ", root, "'s payload is over 64 MiB"));
  }
  return absl::OkStatus();
}

absl::Status GlooWorkerGroup::Barrier() {
  if (size_ == 1) return absl::OkStatus();
  std::vector<uint8_t> flags(size_, 0);
  flags[rank_] = 1;
  return Run("barrier", [&](absl::Time deadline) {
    return RingAllGather(flags.data(), 1, deadline, "barrier");
  });
}

}  // namespace zeroshard
