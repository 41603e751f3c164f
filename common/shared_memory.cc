#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

std::string Errno(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

absl::Status CheckSize(size_t bytes) {
  if (bytes <= SharedMemory::kDataOffset || bytes > SharedMemory::kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: a region of ", bytes, " bytes; want more than ",
        SharedMemory::kDataOffset, " and at most ", SharedMemory::kMaxBytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> Map(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(Errno("shared memory: mmap"));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Create(
    size_t bytes) {
  if (absl::Status s = CheckSize(bytes); !s.ok()) return s;
  std::string nonce(kNonceBytes, '\0');
  size_t got = 0;
  while (got < kNonceBytes) {
    const ssize_t n = ::getrandom(nonce.data() + got, kNonceBytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(Errno("shared memory: getrandom"));
    got += static_cast<size_t>(n);
  }
  const int fd =
      ::memfd_create("zeroshard-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::ResourceExhaustedError(Errno("shared memory: memfd_create"));
  }
  auto fail = [fd](absl::Status s) {
    ::close(fd);
    return s;
  };
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return fail(absl::ResourceExhaustedError(
        Errno(absl::StrCat("shared memory: ftruncate to ", bytes))));
  }
  if (::fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    return fail(absl::InternalError(Errno("shared memory: F_ADD_SEALS")));
  }
  absl::StatusOr<uint8_t*> data = Map(fd, bytes);
  if (!data.ok()) return fail(data.status());
  std::memcpy(*data, nonce.data(), kNonceBytes);
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(*data, bytes, fd, std::move(nonce)));
}

absl::StatusOr<std::unique_ptr<SharedMemory>> SharedMemory::Attach(
    int64_t pid, int64_t fd, size_t bytes, absl::string_view nonce) {
  if (absl::Status s = CheckSize(bytes); !s.ok()) return s;
  if (pid <= 0 || fd < 0 || nonce.size() != kNonceBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: pid ", pid, ", fd ", fd, " and a nonce of ",
        nonce.size(), " bytes do not name a region"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  const int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    return absl::FailedPreconditionError(Errno(absl::StrCat(
        "shared memory: cannot open ", path,
        " (the server runs on another host, in another pid namespace or as "
        "another user)")));
  }
  auto fail = [mine](absl::Status s) {
    ::close(mine);
    return s;
  };
  struct stat st;
  if (::fstat(mine, &st) != 0) {
    return fail(absl::FailedPreconditionError(Errno("shared memory: fstat")));
  }
  const int seals = ::fcntl(mine, F_GET_SEALS);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes ||
      seals < 0 || (seals & kSeals) != kSeals) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "shared memory: ", path, " is not the server's region (",
        st.st_size, " bytes against ", bytes, ", seals ", seals, ")")));
  }
  absl::StatusOr<uint8_t*> data = Map(mine, bytes);
  ::close(mine);
  if (!data.ok()) return data.status();
  if (std::memcmp(*data, nonce.data(), kNonceBytes) != 0) {
    ::munmap(*data, bytes);
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory: ", path,
        " does not hold the server's nonce (another host or pid namespace)"));
  }
  std::atomic_ref<int32_t>(
      *reinterpret_cast<int32_t*>(*data + kClientPidOffset))
      .store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  return std::unique_ptr<SharedMemory>(
      new SharedMemory(*data, bytes, -1, std::string(nonce)));
}

SharedMemory::~SharedMemory() {
  ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

int32_t SharedMemory::client_pid() const {
  return std::atomic_ref<int32_t>(
             *reinterpret_cast<int32_t*>(data_ + kClientPidOffset))
      .load(std::memory_order_relaxed);
}

}  // namespace zeroshard
