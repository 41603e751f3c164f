// The unary KvWait call: finishes OK once every key exists, or
// DEADLINE_EXCEEDED / CANCELLED naming the missing keys when the call is
// cancelled or its deadline passes first, or with the store's error when
// the scope is refused or its keys are dropped (a newer attempt: ABORTED).
// No thread blocks while waiting. The reply (an empty KvWaitResponse) is
// serialised as the call finishes (server/raw_messages.h).
#ifndef ZEROSHARD_SERVER_KV_WAIT_REACTOR_H_
#define ZEROSHARD_SERVER_KV_WAIT_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/kv_store.h"
#include "server/raw_messages.h"
#include "server/rpc_counters.h"

namespace zeroshard {

class KvWaitReactor : public grpc::ServerUnaryReactor {
 public:
  // Keys must have passed KvStore::ValidateKeys; `kv` and `counters` outlive
  // the call. `context` is used to tell a deadline from a cancel; the call
  // finishes through `reply`.
  KvWaitReactor(grpc::CallbackServerContext* context, KvStore* kv,
                const KvScope& scope, const std::vector<std::string>& keys,
                UnaryReply<v1::KvWaitResponse> reply, RpcCounters* counters);

  void OnCancel() override;
  void OnDone() override;

 private:
  // Finishes with `status` unless finished already.
  void FinishOnce(const absl::Status& status);
  void OnReady(const absl::Status& status);
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  grpc::CallbackServerContext* const context_;
  KvStore* const kv_;
  UnaryReply<v1::KvWaitResponse> reply_;
  RpcCounters* const counters_;
  std::atomic<int> refs_{1};

  absl::Mutex mu_;
  uint64_t waiter_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  bool recorded_ ABSL_GUARDED_BY(mu_) = false;  // result_ already counted
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_KV_WAIT_REACTOR_H_
