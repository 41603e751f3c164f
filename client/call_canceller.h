// CallCanceller: cancels client calls from another thread.
//
// A call registers its grpc::ClientContext while it runs; Cancel() cancels
// every registered call and makes later Register() calls fail, so that a
// retry loop stops instead of starting a new attempt. Reset() re-arms it.
//
//   CallCanceller cancel;
//   // thread A: client->Gather(ranges, dtype, v, out, n, &cancel);
//   // thread B: cancel.Cancel();   // A returns CANCELLED promptly
//
// Thread-safe. A context must be unregistered before it is destroyed.
// OldestCall tells how long the longest registered call has run
// (ShardChannels' watch over silent servers).
#ifndef ZEROSHARD_CLIENT_CALL_CANCELLER_H_
#define ZEROSHARD_CLIENT_CALL_CANCELLER_H_

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace zeroshard {

class CallCanceller {
 public:
  // False (and nothing registered) once cancelled: the call must not start.
  bool Register(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    active_.emplace(context, absl::Now());
    return true;
  }
  void Unregister(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    active_.erase(context);
  }
  // Cancels the registered calls (they end with CANCELLED) and refuses new
  // ones until Reset().
  void Cancel();
  void Reset() {
    absl::MutexLock lock(&mu_);
    cancelled_ = false;
  }
  bool cancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // When the longest-running registered call was registered; InfiniteFuture
  // when none is.
  absl::Time OldestCall() const;

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Each registered call, with when it was registered.
  absl::flat_hash_map<grpc::ClientContext*, absl::Time> active_
      ABSL_GUARDED_BY(mu_);
};

// Registers a call's context with a canceller for the guard's scope (a
// null canceller: nothing to register). Declared after the context, so that
// it is unregistered before the context goes away.
//
//   grpc::ClientContext ctx;
//   const ScopedCall scoped(&canceller, &ctx);
//   if (!scoped.registered()) return absl::CancelledError(...);
class ScopedCall {
 public:
  ScopedCall(CallCanceller* canceller, grpc::ClientContext* context)
      : canceller_(canceller),
        context_(context),
        registered_(canceller == nullptr || canceller->Register(context)) {}
  ~ScopedCall() {
    if (canceller_ != nullptr && registered_) canceller_->Unregister(context_);
  }
  ScopedCall(const ScopedCall&) = delete;
  ScopedCall& operator=(const ScopedCall&) = delete;
  // False when the canceller was cancelled already: the call must not start.
  bool registered() const { return registered_; }

 private:
  CallCanceller* const canceller_;
  grpc::ClientContext* const context_;
  const bool registered_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_CALL_CANCELLER_H_
