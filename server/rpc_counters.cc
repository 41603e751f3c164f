#include "server/rpc_counters.h"

namespace zeroshard {

void RpcCounters::RecordCall(absl::string_view method) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(method);
  if (it == calls_.end()) it = calls_.emplace(std::string(method), 0).first;
  ++it->second;
}

void RpcCounters::RecordResult(const absl::Status& status) {
  if (status.ok()) return;
  const std::string name = absl::StatusCodeToString(status.code());
  absl::MutexLock lock(&mu_);
  ++errors_[name];
}

void RpcCounters::RecordRefusal(absl::string_view method,
                                const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  auto& by_method = status.code() == absl::StatusCode::kUnauthenticated
                        ? unauthenticated_
                        : permission_denied_;
  auto it = by_method.find(method);
  if (it == by_method.end()) it = by_method.emplace(std::string(method), 0).first;
  ++it->second;
}

void RpcCounters::Fill(v1::RpcCounters* out) const {
  out->set_bytes_in(bytes_in_.load());
  out->set_bytes_out(bytes_out_.load());
  absl::MutexLock lock(&mu_);
  for (const auto& [k, v] : calls_) (*out->mutable_calls())[k] = v;
  for (const auto& [k, v] : errors_) (*out->mutable_errors())[k] = v;
  for (const auto& [k, v] : unauthenticated_) {
    (*out->mutable_unauthenticated())[k] = v;
  }
  for (const auto& [k, v] : permission_denied_) {
    (*out->mutable_permission_denied())[k] = v;
  }
}

}  // namespace zeroshard
