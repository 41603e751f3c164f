#include "common/watched_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace zeroshard {
namespace {

absl::Status ErrnoError(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

}  // namespace

WatchedFile::WatchedFile(std::string path, absl::Duration check_interval,
                         size_t max_bytes)
    : path_(std::move(path)),
      check_interval_(check_interval),
      max_bytes_(max_bytes) {}

uint64_t WatchedFile::loads() const {
  absl::MutexLock lock(&mu_);
  return loads_;
}

absl::Status WatchedFile::Reload() {
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return ErrnoError(errno, path_);
  const Stamp stamp{static_cast<uint64_t>(st.st_ino),
                    static_cast<uint64_t>(st.st_size),
                    int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  if (contents_ != nullptr && stamp == stamp_) return absl::OkStatus();
  if (static_cast<uint64_t>(st.st_size) > max_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, " is ", st.st_size, " bytes, more than the ", max_bytes_,
        " a credentials file may have"));
  }
  std::ifstream in(path_, std::ios::binary);
  if (!in) return ErrnoError(errno, path_);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return ErrnoError(errno, path_);
  contents_ = std::make_shared<const std::string>(std::move(text).str());
  stamp_ = stamp;
  ++loads_;
  warned_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> WatchedFile::Get() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (contents_ == nullptr || now >= next_check_) {
    next_check_ = now + check_interval_;
    absl::Status s = Reload();
    if (!s.ok()) {
      if (contents_ == nullptr) return s;
      if (!warned_) {
        ZS_LOG(WARNING) << "keeping the last good contents of " << path_
                        << ": " << s.message();
        warned_ = true;
      }
    }
  }
  return contents_;
}

}  // namespace zeroshard
