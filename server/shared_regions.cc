#include "server/shared_regions.h"

#include <signal.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zeroshard {

size_t SharedRegions::FreeOrphans() {
  std::vector<std::shared_ptr<SharedMemory>> freed;  // released unlocked
  absl::MutexLock lock(&mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    const int32_t pid = it->second->client_pid();
    // Only a pid that names no process: one of another user (EPERM), or a
    // reused pid, keeps its region.
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      bytes_ -= it->second->size();
      freed.push_back(std::move(it->second));
      regions_.erase(it++);
    } else {
      ++it;
    }
  }
  return freed.size();
}

absl::StatusOr<SharedRegions::Opened> SharedRegions::Open(
    size_t bytes, size_t max_bytes, size_t max_total_bytes) {
  if (bytes <= SharedMemory::kDataOffset || bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OpenRegion: ", bytes, " bytes; want more than ",
        SharedMemory::kDataOffset, " and at most ", max_bytes,
        " (one page and twice this server's range in FP32)"));
  }
  auto full = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (regions_.size() >= kMaxRegions) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "OpenRegion: this server has ", regions_.size(),
          " regions open, its limit; close one (CloseRegion) or use gRPC"));
    }
    if (bytes > max_total_bytes - std::min(bytes_, max_total_bytes)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "OpenRegion: ", bytes, " bytes more would bring this server's "
          "regions past their limit of ", max_total_bytes, " (", bytes_,
          " open); close one (CloseRegion) or use gRPC"));
    }
    return absl::OkStatus();
  };
  FreeOrphans();
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = full(); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<SharedMemory>> made =
      SharedMemory::Create(bytes);
  if (!made.ok()) {
    return absl::Status(made.status().code(),
                        absl::StrCat("OpenRegion: ", made.status().message()));
  }
  Opened out;
  out.memory = std::move(*made);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = full(); !s.ok()) return s;
  // Random ids: a caller cannot name a region it was not told of.
  do {
    if (::getrandom(&out.id, sizeof(out.id), 0) !=
        static_cast<ssize_t>(sizeof(out.id))) {
      if (errno == EINTR) continue;
      return absl::InternalError("OpenRegion: getrandom failed");
    }
  } while (out.id == 0 || regions_.contains(out.id));
  regions_.emplace(out.id, out.memory);
  bytes_ += bytes;
  return out;
}

absl::StatusOr<std::shared_ptr<SharedMemory>> SharedRegions::Find(
    uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "region ", id, " is not open on this server (closed, or opened on "
        "another server or before a restart)"));
  }
  return it->second;
}

absl::Status SharedRegions::Close(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("CloseRegion: region ", id, " is not open"));
  }
  bytes_ -= it->second->size();
  regions_.erase(it);
  return absl::OkStatus();
}

size_t SharedRegions::size() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

size_t SharedRegions::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::StatusOr<uint8_t*> SharedRegions::Span(const SharedMemory& memory,
                                             uint64_t offset, uint64_t bytes,
                                             absl::string_view what) {
  if (offset < SharedMemory::kDataOffset || offset > memory.size() ||
      bytes > memory.size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bytes [", offset, ", ", offset, " + ", bytes,
        ") are not inside the region's data [", SharedMemory::kDataOffset,
        ", ", memory.size(), ")"));
  }
  return memory.data() + offset;
}

absl::StatusOr<SharedRegions::Resolved> SharedRegions::Resolve(
    uint64_t id, uint64_t offset, uint64_t bytes,
    absl::string_view what) const {
  absl::StatusOr<std::shared_ptr<SharedMemory>> found = Find(id);
  if (!found.ok()) {
    return absl::Status(found.status().code(),
                        absl::StrCat(what, ": ", found.status().message()));
  }
  absl::StatusOr<uint8_t*> at = Span(**found, offset, bytes, what);
  if (!at.ok()) return at.status();
  return Resolved{*std::move(found), *at};
}

}  // namespace zeroshard
