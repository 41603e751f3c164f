#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

std::string Errno() { return std::strerror(errno); }

// fsync of the directory holding `path`, so that a rename into it survives
// a crash.
absl::Status SyncDirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(
        absl::StrCat("cannot open directory ", dir, ": ", Errno()));
  }
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : Errno();
  ::close(fd);
  if (!ok) {
    return absl::DataLossError(
        absl::StrCat("cannot sync directory ", dir, ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(
    const std::string& path, bool direct) {
  // The pid and a per-process counter keep two writers of the same path,
  // in any processes, from sharing a temporary file; O_EXCL | O_NOFOLLOW
  // refuses anything already at that name (a symlink planted there too).
  static std::atomic<uint64_t> counter{0};
  std::string tmp =
      absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = direct ? ::open(tmp.c_str(), kFlags | O_DIRECT, 0644) : -1;
  if (fd < 0) {
    // Not asked, or refused: by the file system (EINVAL), or for a reason
    // the plain open below meets and reports too.
    direct = false;
    fd = ::open(tmp.c_str(), kFlags, 0644);
  }
  if (fd < 0) {
    // Said of the file the caller names (the temporary name is ours), and
    // as what it is: a missing folder is not a refused permission.
    const int err = errno;
    const std::string dir =
        std::filesystem::path(path).parent_path().string();
    const std::string where = dir.empty() ? "." : dir;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(
          "cannot write ", path, ": no such directory ", where));
    }
    if (err == EACCES || err == EPERM || err == EROFS) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot write ", path, ": ", std::strerror(err), " (in ", where,
          ")"));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
  }
  return AtomicFileWriter(path, std::move(tmp), fd, direct);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::move(other.tmp_)),
      fd_(std::exchange(other.fd_, -1)),
      written_(other.written_),
      direct_(other.direct_) {}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::DropDirect() {
  if (!direct_) return;
  direct_ = false;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT);
}

absl::Status AtomicFileWriter::Append(const void* data, size_t bytes) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": written after Commit or a failure"));
  }
  if (direct_ && (reinterpret_cast<uintptr_t>(data) % kDirectIoAlign != 0 ||
                  bytes % kDirectIoAlign != 0 ||
                  written_ % kDirectIoAlign != 0)) {
    DropDirect();
  }
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_) {
      DropDirect();  // a file system that opened O_DIRECT but refuses it
      continue;
    }
    if (n > 0 && direct_ && static_cast<size_t>(n) % kDirectIoAlign != 0) {
      DropDirect();  // a short write leaves the rest unaligned
    }
    if (n <= 0) {
      const std::string why = n < 0 ? Errno() : "no progress";
      Abandon();
      return absl::DataLossError(
          absl::StrCat("cannot write ", tmp_, ": ", why));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": committed twice or after a failure"));
  }
  if (::fsync(fd_) != 0) {
    const std::string why = Errno();
    Abandon();
    return absl::DataLossError(absl::StrCat("cannot sync ", tmp_, ": ", why));
  }
  if (::close(std::exchange(fd_, -1)) != 0) {
    const std::string why = Errno();
    ::unlink(tmp_.c_str());
    return absl::DataLossError(absl::StrCat("cannot close ", tmp_, ": ", why));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = Errno();
    ::unlink(tmp_.c_str());
    return absl::DataLossError(
        absl::StrCat("cannot rename ", tmp_, " to ", path_, ": ", why));
  }
  return SyncDirectoryOf(path_);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Open(path);
  if (!w.ok()) return w.status();
  absl::Status s = w->Append(bytes.data(), bytes.size());
  if (!s.ok()) return s;
  return w->Commit();
}

}  // namespace zeroshard
