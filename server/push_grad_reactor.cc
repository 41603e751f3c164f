#include "server/push_grad_reactor.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "wire/grpc_status.h"
#include "wire/proto_buffer.h"

namespace zeroshard {

PushGradReactor::PushGradReactor(std::shared_ptr<ModelShard> state,
                                 grpc::ByteBuffer* response,
                                 RpcCounters* counters, IdleStreams* idle,
                                 const SharedRegions* regions)
    : response_(response),
      counters_(counters),
      idle_(idle),
      session_(std::move(state), regions) {
  waiting_since_ns_.store(absl::ToUnixNanos(absl::Now()));
  idle_->Add(this);
  StartRead(&message_);
}

void PushGradReactor::OnReadDone(bool ok) {
  waiting_since_ns_.store(0);
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;  // expired while the read was pending
    if (!ok) {
      // Half-close, cancellation or a broken connection.
      status = session_.OnEndOfStream();
    } else {
      status = DecodePushGradMessage(message_, &decoded_);
      message_.Clear();
      if (status.ok()) {
        status = decoded_.is_piece
                     ? session_.OnPiece(std::move(decoded_.piece))
                     : session_.OnMessage(decoded_.message);
      }
      decoded_.piece = PushGradPieceInput();
      const uint64_t bytes = session_.payload_bytes();
      counters_->AddBytesIn(bytes - counted_bytes_);
      counted_bytes_ = bytes;
    }
    if (ok && status.ok() && !session_.finished()) {
      // Marked waiting under the lock, so that an expiry finds the stream
      // either busy or waiting; the read starts outside it (gRPC may run a
      // reaction inline). An expiry in between finishes the call first, and
      // the read then fails.
      waiting_since_ns_.store(absl::ToUnixNanos(absl::Now()));
    } else {
      if (!EndLocked(status)) return;
      ok = false;  // finish below
    }
  }
  if (ok) {
    StartRead(&message_);
  } else {
    FinishWith(status);
  }
}

bool PushGradReactor::EndLocked(const absl::Status& status) {
  if (ended_) return false;
  ended_ = true;
  waiting_since_ns_.store(0);
  result_ = status;
  // A failed stream gives back its buffers before the status goes out.
  if (!status.ok()) session_.Discard();
  // Counted before the client can see the status (see RpcCounters).
  counters_->RecordResult(result_);
  recorded_ = true;
  if (status.ok()) *response_ = ProtoToByteBuffer(session_.response());
  return true;
}

bool PushGradReactor::TakeIfIdle(absl::Time now, absl::Duration timeout) {
  const int64_t since = waiting_since_ns_.load();
  if (since == 0 || now - absl::FromUnixNanos(since) < timeout) return false;
  refs_.fetch_add(1);
  return true;
}

void PushGradReactor::Expire(absl::Duration timeout) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    const int64_t since = waiting_since_ns_.load();
    // A message may have arrived since the sweeper looked.
    if (!ended_ && since != 0 &&
        absl::Now() - absl::FromUnixNanos(since) >= timeout) {
      const v1::PushGradHeader& h = session_.header();
      status = absl::DeadlineExceededError(absl::StrCat(
          "PushGrad: the stream",
          session_.has_header()
              ? absl::StrCat(" for step ", h.step(), " from worker ",
                             h.worker())
              : std::string(),
          " was idle for ", absl::ToDoubleSeconds(timeout),
          " s (the server's push idle timeout, --push_idle_timeout_s) "
          "before its commit; nothing of it is applied and its buffers are "
          "freed"));
      if (!EndLocked(status)) status = absl::OkStatus();
    }
  }
  if (!status.ok()) FinishWith(status);
  Unref();
}

void PushGradReactor::OnDone() {
  idle_->Remove(this);
  {
    absl::MutexLock lock(&mu_);
    if (!recorded_) counters_->RecordResult(result_);
  }
  Unref();
}

}  // namespace zeroshard
