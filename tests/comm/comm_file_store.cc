#include "tests/comm/comm_file_store.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace zeroshard {

std::string FileRendezvousStore::PathOf(const std::string& key) const {
  std::string name;
  for (char c : key) {
    if (c == '/') {
      name += "%2F";
    } else if (c == '%') {
      name += "%25";
    } else {
      name += c;
    }
  }
  return absl::StrCat(dir_, "/", name);
}

absl::Status FileRendezvousStore::Set(const std::string& key,
                                      const std::string& value) {
  static std::atomic<int> counter{0};
  const std::string path = PathOf(key);
  const std::string tmp =
      absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileRendezvousStore::Get(const std::string& key,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string path = PathOf(key);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream value;
      value << in.rdbuf();
      return value.str();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous key '", key, "' not set within ",
                       absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

absl::Status FileRendezvousStore::Wait(const std::vector<std::string>& keys,
                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    absl::Duration left = deadline - absl::Now();
    if (left < absl::ZeroDuration()) left = absl::ZeroDuration();
    absl::StatusOr<std::string> value = Get(key, left);
    if (!value.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous keys not all set within ",
                       absl::FormatDuration(timeout)));
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
