#include "server/kv_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

absl::Status ValidateKey(const std::string& key) {
  if (key.empty() || key.size() > KvStore::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key of ", key.size(), " bytes; keys hold 1 to ",
        KvStore::kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KvStore::Set(const std::string& key, std::string value) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value for key '", key, "' has ", value.size(),
                     " bytes; the limit is ", kMaxValueBytes));
  }
  std::vector<std::function<void()>> wake;
  {
    absl::MutexLock lock(&mu_);
    if (!values_.contains(key) && values_.size() >= kMaxKeys) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the key-value store holds ", kMaxKeys, " keys, its limit"));
    }
    values_[key] = std::move(value);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      it->second.missing.erase(key);
      if (it->second.missing.empty()) {
        wake.push_back(std::move(it->second.wake));
        waiters_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& f : wake) f();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> KvStore::Get(
    const std::string& key) const {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::Status KvStore::ValidateKeys(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxWaitKeys) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KvWait for ", keys.size(), " keys; the limit is ", kMaxWaitKeys));
  }
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return s;
  }
  return absl::OkStatus();
}

uint64_t KvStore::WaitForKeys(const std::vector<std::string>& keys,
                              std::function<void()> wake) {
  absl::MutexLock lock(&mu_);
  Waiter w;
  for (const std::string& k : keys) {
    if (!values_.contains(k)) w.missing.insert(k);
  }
  if (w.missing.empty()) return 0;
  w.wake = std::move(wake);
  const uint64_t id = next_id_++;
  waiters_.emplace(id, std::move(w));
  return id;
}

bool KvStore::CancelWait(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(id) > 0;
}

std::vector<std::string> KvStore::Missing(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return {};
  return {it->second.missing.begin(), it->second.missing.end()};
}

}  // namespace zeroshard
