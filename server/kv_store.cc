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

absl::Status KvStore::ValidateRunId(absl::string_view run_id) {
  if (run_id.empty() || run_id.size() > kMaxRunIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "run_id of ", run_id.size(), " characters; a run id holds 1 to ",
        kMaxRunIdBytes, " printable ASCII characters"));
  }
  for (size_t i = 0; i < run_id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(run_id[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "run_id has byte 0x", absl::Hex(c), " at position ", i,
          "; a run id holds printable ASCII characters only"));
    }
  }
  return absl::OkStatus();
}

void KvStore::FailWaiters(Run& run, const absl::Status& status,
                          Wakes* wakes) {
  for (uint64_t id : run.waiters) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    wakes->emplace_back(std::move(it->second.wake), status);
    waiters_.erase(it);
  }
  run.waiters.clear();
}

absl::StatusOr<KvStore::Run*> KvStore::Enter(const KvScope& scope,
                                             Wakes* wakes) {
  auto it = runs_.find(scope.run_id);
  if (it == runs_.end()) {
    if (runs_.size() >= limits_.max_runs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the key-value store holds keys of ", runs_.size(),
          " runs, its limit of runs; run '", scope.run_id,
          "' cannot start (restart the server, or initialise it: an "
          "initialised server keeps only its own run)"));
    }
    Run& run = runs_[scope.run_id];
    run.attempt = scope.attempt;
    return &run;
  }
  Run& run = it->second;
  if (scope.attempt < run.attempt) {
    return absl::AbortedError(absl::StrCat(
        "attempt ", scope.attempt, " of run '", scope.run_id,
        "' is over: attempt ", run.attempt,
        " has started and its keys replaced the older attempts'"));
  }
  if (scope.attempt > run.attempt) {
    FailWaiters(run,
                absl::AbortedError(absl::StrCat(
                    "attempt ", run.attempt, " of run '", scope.run_id,
                    "' is over: attempt ", scope.attempt,
                    " has started; its keys were dropped")),
                wakes);
    run.values.clear();
    run.bytes = 0;
    run.attempt = scope.attempt;
  }
  return &run;
}

absl::Status KvStore::Set(const KvScope& scope, const std::string& key,
                          std::string value) {
  if (absl::Status s = ValidateRunId(scope.run_id); !s.ok()) return s;
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "value for key '", key, "' has ", value.size(),
        " bytes; the limit per value is ", limits_.max_value_bytes));
  }
  Wakes wakes;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    // The limits are checked against the run as it would be once entered
    // (a newer attempt starts empty) before Enter changes anything: a
    // refused Set neither drops the older attempt's keys nor creates a run.
    const auto found = runs_.find(scope.run_id);
    const bool fresh =
        found == runs_.end() || scope.attempt > found->second.attempt;
    const Run empty;
    const Run& seen = fresh ? empty : found->second;
    const auto old = seen.values.find(key);
    const bool is_new = old == seen.values.end();
    const size_t old_bytes = is_new ? 0 : key.size() + old->second.size();
    const size_t new_bytes = seen.bytes - old_bytes + key.size() + value.size();
    if (found != runs_.end() && scope.attempt < found->second.attempt) {
      status = Enter(scope, &wakes).status();  // ABORTED, changing nothing
    } else if (is_new && seen.values.size() >= limits_.max_keys_per_run) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "run '", scope.run_id, "' holds ", seen.values.size(),
          " keys in the key-value store, its limit of keys per run; key '",
          key, "' not set"));
    } else if (new_bytes > limits_.max_bytes_per_run) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "setting key '", key, "' would bring run '", scope.run_id,
          "' to ", new_bytes, " bytes of keys and values, over the limit "
          "of bytes per run of ", limits_.max_bytes_per_run));
    } else if (absl::StatusOr<Run*> entered = Enter(scope, &wakes);
               !entered.ok()) {
      status = entered.status();
    } else {
      Run& run = **entered;
      run.bytes = new_bytes;
      if (auto it = run.values.find(key); it == run.values.end()) {
        run.values.emplace(key, std::move(value));
      } else {
        it->second = std::move(value);
      }
      for (auto w = run.waiters.begin(); w != run.waiters.end();) {
        auto wit = waiters_.find(*w);
        wit->second.missing.erase(key);
        if (wit->second.missing.empty()) {
          wakes.emplace_back(std::move(wit->second.wake), absl::OkStatus());
          waiters_.erase(wit);
          run.waiters.erase(w++);
        } else {
          ++w;
        }
      }
    }
  }
  for (auto& [wake, s] : wakes) wake(s);
  return status;
}

absl::StatusOr<std::optional<std::string>> KvStore::Get(
    const KvScope& scope, const std::string& key) {
  if (absl::Status s = ValidateRunId(scope.run_id); !s.ok()) return s;
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  Wakes wakes;
  absl::StatusOr<std::optional<std::string>> result;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Run*> entered = Enter(scope, &wakes);
    if (!entered.ok()) {
      result = entered.status();
    } else {
      auto it = (*entered)->values.find(key);
      result = it == (*entered)->values.end()
                   ? std::nullopt
                   : std::optional<std::string>(it->second);
    }
  }
  for (auto& [wake, s] : wakes) wake(s);
  return result;
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

absl::StatusOr<uint64_t> KvStore::WaitForKeys(
    const KvScope& scope, const std::vector<std::string>& keys,
    std::function<void(absl::Status)> wake) {
  if (absl::Status s = ValidateRunId(scope.run_id); !s.ok()) return s;
  Wakes wakes;
  absl::StatusOr<uint64_t> result;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Run*> entered = Enter(scope, &wakes);
    if (!entered.ok()) {
      result = entered.status();
    } else {
      Run& run = **entered;
      Waiter w;
      w.run_id = scope.run_id;
      for (const std::string& k : keys) {
        if (!run.values.contains(k)) w.missing.insert(k);
      }
      if (w.missing.empty()) {
        result = 0;
      } else {
        w.wake = std::move(wake);
        const uint64_t id = next_id_++;
        waiters_.emplace(id, std::move(w));
        run.waiters.insert(id);
        result = id;
      }
    }
  }
  for (auto& [f, s] : wakes) f(s);
  return result;
}

bool KvStore::CancelWait(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return false;
  auto run = runs_.find(it->second.run_id);
  if (run != runs_.end()) run->second.waiters.erase(id);
  waiters_.erase(it);
  return true;
}

std::vector<std::string> KvStore::Missing(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return {};
  return {it->second.missing.begin(), it->second.missing.end()};
}

void KvStore::RetainOnlyRun(const std::string& run_id) {
  Wakes wakes;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = runs_.begin(); it != runs_.end();) {
      if (it->first == run_id) {
        ++it;
        continue;
      }
      FailWaiters(it->second,
                   absl::PermissionDeniedError(absl::StrCat(
                       "the server was initialised for run '", run_id,
                       "'; the keys of run '", it->first, "' were dropped")),
                   &wakes);
      runs_.erase(it++);
    }
  }
  for (auto& [wake, s] : wakes) wake(s);
}

KvStore::RunUsage KvStore::Usage(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return {};
  return {it->second.attempt, it->second.values.size(), it->second.bytes};
}

}  // namespace zeroshard
