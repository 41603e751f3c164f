// A run's hold on its --out directory: one zeroshard-train at a time writes
// there (its credentials, metrics, logs and cluster.json), so a second run
// given the same directory is refused instead of replacing the first one's
// tokens under its live servers.
//
//   ASSIGN_OR_RETURN(OutDirLock lock, OutDirLock::Acquire(out_dir));
//   // ... the run; the lock is released when `lock` goes away (or the
//   // process dies: the kernel drops an flock with its last descriptor).
//
// The lock is an flock(2) on OUT/zeroshard-train.lock, which holds the
// holder's pid for the refusal's message. The descriptor is close-on-exec,
// so the servers and workers the run starts do not keep it.
#ifndef ZEROSHARD_TOOLS_TRAIN_OUT_DIR_LOCK_H_
#define ZEROSHARD_TOOLS_TRAIN_OUT_DIR_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace zeroshard {

class OutDirLock {
 public:
  // FAILED_PRECONDITION naming the live run's pid when another process
  // holds `dir`; PERMISSION_DENIED (or the errno's code) when the lock file
  // cannot be made. `dir` must exist.
  static absl::StatusOr<OutDirLock> Acquire(const std::string& dir);

  OutDirLock(OutDirLock&& other) noexcept;
  OutDirLock& operator=(OutDirLock&& other) noexcept;
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;
  ~OutDirLock();

  const std::string& path() const { return path_; }

 private:
  OutDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_TOOLS_TRAIN_OUT_DIR_LOCK_H_
