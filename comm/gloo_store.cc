#include "comm/gloo_store.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zeroshard {
namespace {

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

GlooRendezvousStore::GlooRendezvousStore(RendezvousStore* store,
                                         std::string prefix, std::string group,
                                         absl::Duration timeout)
    : store_(store),
      prefix_(std::move(prefix)),
      group_(std::move(group)),
      timeout_(timeout) {}

void GlooRendezvousStore::set(const std::string& key,
                              const std::vector<char>& data) {
  absl::Status status =
      store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw RendezvousFailure(absl::Status(
        status.code(), absl::StrCat("rendezvous of worker group '", group_,
                                    "': set '", key, "': ", status.message())));
  }
}

std::vector<char> GlooRendezvousStore::get(const std::string& key) {
  WaitFor({key}, timeout_);
  absl::StatusOr<std::string> value = store_->Get(prefix_ + key, timeout_);
  if (!value.ok()) {
    throw RendezvousFailure(absl::Status(
        value.status().code(),
        absl::StrCat("rendezvous of worker group '", group_, "': get '", key,
                     "': ", value.status().message())));
  }
  return std::vector<char>(value->begin(), value->end());
}

void GlooRendezvousStore::wait(const std::vector<std::string>& keys) {
  WaitFor(keys, timeout_);
}

void GlooRendezvousStore::wait(const std::vector<std::string>& keys,
                               const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout here; ours is the bound we promised.
  absl::Duration bound = absl::FromChrono(timeout);
  if (bound <= absl::ZeroDuration() || bound > timeout_) bound = timeout_;
  WaitFor(keys, bound);
}

void GlooRendezvousStore::WaitFor(const std::vector<std::string>& keys,
                                  absl::Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  absl::Status status = store_->Wait(full, timeout);
  if (status.ok()) return;
  if (status.code() != absl::StatusCode::kDeadlineExceeded) {
    throw RendezvousFailure(absl::Status(
        status.code(), absl::StrCat("rendezvous of worker group '", group_,
                                    "': ", status.message())));
  }
  // Name who is missing: Gloo's keys are rank numbers.
  std::vector<std::string> missing_ranks;
  std::vector<std::string> missing_keys;
  for (const std::string& k : keys) {
    if (store_->Get(prefix_ + k, absl::ZeroDuration()).ok()) continue;
    if (AllDigits(k)) {
      missing_ranks.push_back(k);
    } else {
      missing_keys.push_back(k);
    }
  }
  std::string who;
  if (!missing_ranks.empty()) {
    who = absl::StrCat("rank ", absl::StrJoin(missing_ranks, ", rank "),
                       " did not join");
  } else {
    who = absl::StrCat("keys not set: ", absl::StrJoin(missing_keys, ", "));
  }
  throw RendezvousFailure(absl::DeadlineExceededError(absl::StrCat(
      "rendezvous of worker group '", group_, "': ", who, " within ",
      absl::FormatDuration(timeout))));
}

}  // namespace zeroshard
