// Fuzz bytes as a file the code under test can open by path: an anonymous
// in-memory file (memfd) named by /proc/self/fd/N, so a run touches no disk
// and leaves nothing behind. Closed on destruction.
#ifndef ZEROSHARD_TESTS_FUZZ_FUZZ_FILE_H_
#define ZEROSHARD_TESTS_FUZZ_FUZZ_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace zeroshard::fuzz {

class MemFile {
 public:
  explicit MemFile(std::string_view bytes)
      : fd_(::memfd_create("zeroshard-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        std::perror("write");
        std::abort();
      }
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace zeroshard::fuzz

#endif  // ZEROSHARD_TESTS_FUZZ_FUZZ_FILE_H_
