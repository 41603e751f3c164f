#include "tools/train/out_dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace zeroshard {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string text = absl::StrCat(what, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(text);
  }
  return absl::InternalError(text);
}

// The pid the holder wrote, or "" when the file holds none (yet).
std::string ReadHolder(int fd) {
  char buf[32] = {};
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  uint64_t pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)),
                        &pid)) {
    return "";
  }
  return absl::StrCat(pid);
}

}  // namespace

absl::StatusOr<OutDirLock> OutDirLock::Acquire(const std::string& dir) {
  std::string path = dir + "/zeroshard-train.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      close(fd);
      return ErrnoStatus(err, absl::StrCat("cannot lock ", path));
    }
    const std::string pid = ReadHolder(fd);
    close(fd);
    // A bad --out for this run (exit 2), as one that is a file.
    return absl::InvalidArgumentError(absl::StrCat(
        "--out=", dir, " is in use by a running zeroshard-train",
        pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")"),
        ": give this run another --out, or stop that one first"));
  }
  const std::string me = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot write ", path));
  }
  return OutDirLock(fd, std::move(path));
}

OutDirLock::OutDirLock(OutDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

OutDirLock& OutDirLock::operator=(OutDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

OutDirLock::~OutDirLock() {
  // The file stays (removing it would race a run that just opened it); an
  // unlocked file is free.
  if (fd_ >= 0) close(fd_);
}

}  // namespace zeroshard
