#include "server/kv_wait_reactor.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "wire/grpc_status.h"

namespace zeroshard {

KvWaitReactor::KvWaitReactor(grpc::CallbackServerContext* context, KvStore* kv,
                             const KvScope& scope,
                             const std::vector<std::string>& keys,
                             UnaryReply<v1::KvWaitResponse> reply,
                             RpcCounters* counters)
    : context_(context),
      kv_(kv),
      reply_(std::move(reply)),
      counters_(counters) {
  absl::Status done;  // how the call ends at once, if it does
  bool now = false;
  {
    absl::MutexLock lock(&mu_);
    refs_.fetch_add(1);  // held by the waiter callback
    absl::StatusOr<uint64_t> id = kv_->WaitForKeys(
        scope, keys, [this](absl::Status s) { OnReady(s); });
    if (!id.ok() || *id == 0) {
      refs_.fetch_sub(1);
      now = true;
      done = id.status();
    } else {
      waiter_id_ = *id;
    }
  }
  if (now) FinishOnce(done);
}

void KvWaitReactor::FinishOnce(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    result_ = status;
    // Counted before the status goes out, as every other method does.
    counters_->RecordResult(result_);
    recorded_ = true;
  }
  reply_.Finish(this, status);
}

void KvWaitReactor::OnReady(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    waiter_id_ = 0;
  }
  FinishOnce(status);
  Unref();
}

void KvWaitReactor::OnCancel() {
  bool finish = false;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (waiter_id_ == 0 || finished_) return;  // finished, or finishing
    const std::vector<std::string> missing = kv_->Missing(waiter_id_);
    if (!kv_->CancelWait(waiter_id_)) return;  // its callback finishes
    waiter_id_ = 0;
    finished_ = finish = true;
    const bool expired =
        context_->deadline() <= std::chrono::system_clock::now();
    const std::string text = absl::StrCat(
        "KvWait ", expired ? "deadline passed" : "cancelled",
        " before these keys were set: ", absl::StrJoin(missing, ", "));
    status = expired ? absl::DeadlineExceededError(text)
                     : absl::CancelledError(text);
    result_ = status;
    // Counted before the status goes out, as every other method does.
    counters_->RecordResult(result_);
    recorded_ = true;
  }
  if (finish) {
    reply_.Finish(this, status);
    Unref();
  }
}

void KvWaitReactor::OnDone() {
  {
    absl::MutexLock lock(&mu_);
    if (!recorded_) counters_->RecordResult(result_);
  }
  Unref();
}

}  // namespace zeroshard
