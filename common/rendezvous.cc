#include "common/rendezvous.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::Status InMemoryRendezvousStore::Set(const std::string& key,
                                          const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryRendezvousStore::Get(
    const std::string& key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return values_.contains(key);
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous key '", key, "' not set within ",
                     absl::FormatDuration(timeout)));
  }
  return values_[key];
}

absl::Status InMemoryRendezvousStore::Wait(const std::vector<std::string>& keys,
                                           absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const auto& k : keys) {
      if (!values_.contains(k)) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous keys not all set within ",
                     absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
