// Memory shared by a shard server and a client on the same host
// (docs/DESIGN.md, "Shared memory on one host").
//
// The server creates a region: an anonymous memory file (memfd) of a fixed
// size, sealed so that neither side can shrink or grow it (a mapping of a
// file that shrinks would fault on access), mapped read-write. Its first
// kNonceBytes bytes hold a random nonce. The client opens the same file
// through /proc/<server pid>/fd/<fd> (the kernel allows that to processes
// that may trace the server: its own user), checks its size, its seals and
// the nonce, and maps it too. A client on another host or in another pid
// namespace opens some other file or none, and the nonce tells.
//
//   // server
//   ASSIGN_OR_RETURN(auto region, SharedMemory::Create(bytes));
//   reply(getpid(), region->fd(), region->nonce());
//   // client
//   ASSIGN_OR_RETURN(auto mine, SharedMemory::Attach(pid, fd, bytes, nonce));
//   memcpy(mine->data() + SharedMemory::kDataOffset, grads, n);
//
// Thread-safe (the mapping does not change); what the bytes mean, and who
// writes them when, is the caller's protocol.
#ifndef ZEROSHARD_COMMON_SHARED_MEMORY_H_
#define ZEROSHARD_COMMON_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

class SharedMemory {
 public:
  static constexpr size_t kNonceBytes = 16;
  // After the nonce: the attached client's pid (int32, 0 until a client
  // attaches), which Attach writes, so that the server can free the region
  // of a client that died without closing it (SharedRegions).
  static constexpr size_t kClientPidOffset = kNonceBytes;
  // Data starts one page in, after the nonce.
  static constexpr size_t kDataOffset = 4096;
  // The largest region either side maps.
  static constexpr size_t kMaxBytes = size_t{64} << 30;

  // A new sealed region of `bytes` bytes (kDataOffset < bytes <= kMaxBytes),
  // zero-filled but for its nonce. The file stays open (fd()) for clients.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(size_t bytes);
  // Maps the region /proc/<pid>/fd/<fd> and checks that it is `bytes` long,
  // sealed against shrinking and growing, and starts with `nonce`; then
  // records this process as its client (kClientPidOffset);
  // FAILED_PRECONDITION naming what differs (another host, another pid
  // namespace, another user). The file is closed once mapped.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Attach(
      int64_t pid, int64_t fd, size_t bytes, absl::string_view nonce);

  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The server's file descriptor; -1 on the client.
  int fd() const { return fd_; }
  const std::string& nonce() const { return nonce_; }
  // The pid the last client to attach wrote (0: none yet).
  int32_t client_pid() const;

 private:
  SharedMemory(uint8_t* data, size_t size, int fd, std::string nonce)
      : data_(data), size_(size), fd_(fd), nonce_(std::move(nonce)) {}

  uint8_t* const data_;
  const size_t size_;
  const int fd_;
  const std::string nonce_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_SHARED_MEMORY_H_
