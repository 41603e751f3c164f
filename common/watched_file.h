// A small file whose contents are re-read when it changes: credentials
// (bearer tokens, the server's role -> token table) that Kubernetes rotates
// by replacing the mounted file, without restarting the process.
//
//   WatchedFile token("/etc/zeroshard/worker.token");
//   ASSIGN_OR_RETURN(std::shared_ptr<const std::string> text, token.Get());
//
// Get() looks at the file (stat: inode, size, modification time) at most
// once per `check_interval` and re-reads it when any of them changed. A file
// that vanishes or cannot be read after a good read keeps the last good
// contents (a rotation replaces files in several steps) and logs a warning
// once; before the first good read, Get() returns the error (NOT_FOUND /
// PERMISSION_DENIED naming the path). Files over `max_bytes` are refused.
//
// Thread-safe.
#ifndef ZEROSHARD_COMMON_WATCHED_FILE_H_
#define ZEROSHARD_COMMON_WATCHED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace zeroshard {

class WatchedFile {
 public:
  explicit WatchedFile(std::string path,
                       absl::Duration check_interval = absl::Seconds(1),
                       size_t max_bytes = 1 << 20);

  const std::string& path() const { return path_; }
  // The current contents (shared: callers may hold it while it is replaced).
  absl::StatusOr<std::shared_ptr<const std::string>> Get();
  // How many times the contents were (re)loaded.
  uint64_t loads() const;

 private:
  struct Stamp {
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  absl::Status Reload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const absl::Duration check_interval_;
  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::Time next_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Stamp stamp_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::string> contents_ ABSL_GUARDED_BY(mu_);
  uint64_t loads_ ABSL_GUARDED_BY(mu_) = 0;
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_WATCHED_FILE_H_
