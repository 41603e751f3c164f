// Writing a file so that readers see either the old contents or the whole
// new contents, never a part, and so that a crash right after the call
// returns loses nothing: the bytes go to a temporary file next to `path`,
// which is fsynced, renamed over `path` (atomic on one file system), and the
// directory is fsynced so the rename itself is durable.
//
//   RETURN_IF_ERROR(WriteFileAtomically(dir + "/weights.json", json_text));
//
//   ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Open(path));
//   RETURN_IF_ERROR(w.Append(p, n));   // as many times as needed
//   RETURN_IF_ERROR(w.Commit());       // nothing is visible at `path` before
//
// With `direct` (AtomicFileWriter::Open's option) the writer asks for
// O_DIRECT: an Append of whole kDirectIoAlign blocks from memory aligned to
// kDirectIoAlign, at an aligned place in the file, then goes from that
// memory to the disk without a copy into the page cache (fresh page-cache
// pages cost as much as the copy on a VM whose host hands out memory on
// first touch). Anything else, or a file system that refuses O_DIRECT
// (tmpfs), goes through the page cache as without it; the file is the same.
//
// Errors: PERMISSION_DENIED when the temporary file cannot be created,
// DATA_LOSS when writing, syncing or renaming fails. On any of those, and
// when a writer is destroyed without Commit, the temporary file is removed
// and `path` is left as it was. One exception: when only the final fsync of
// the directory fails, the new file is already at `path` (DATA_LOSS says
// the rename may not survive a crash).
#ifndef ZEROSHARD_COMMON_ATOMIC_FILE_H_
#define ZEROSHARD_COMMON_ATOMIC_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes);

inline constexpr size_t kDirectIoAlign = 4096;

class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path,
                                               bool direct = false);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(const void* data, size_t bytes);
  // Syncs, renames over the path, syncs the directory. Once.
  absl::Status Commit();

  uint64_t bytes_written() const { return written_; }
  // Whether Appends may still bypass the page cache.
  bool direct() const { return direct_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd, bool direct)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), direct_(direct) {}
  void Abandon();
  // Turns O_DIRECT off for the rest of the file.
  void DropDirect();

  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool direct_ = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_ATOMIC_FILE_H_
