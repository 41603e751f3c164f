#include "common/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// The file's XXH3-64 over [0, bytes - 8) and its trailer, the last 8 bytes
// (little-endian); only the trailer unless `full`.
struct FileSums {
  uint64_t hashed = 0, trailer = 0;
};

absl::StatusOr<FileSums> ReadSums(int fd, uint64_t bytes, bool full) {
  FileSums s;
  unsigned char tail[8];
  if (pread(fd, tail, 8, static_cast<off_t>(bytes - 8)) != 8) {
    return absl::DataLossError(absl::StrCat("cannot read its last 8 bytes: ",
                                            std::strerror(errno)));
  }
  for (int i = 7; i >= 0; --i) s.trailer = (s.trailer << 8) | tail[i];
  if (!full) return s;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(
      XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<unsigned char> buf(size_t{1} << 20);
  uint64_t at = 0;
  while (at < bytes - 8) {
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(buf.size(), bytes - 8 - at));
    const ssize_t n = pread(fd, buf.data(), want, static_cast<off_t>(at));
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat("read failed at byte ", at, ": ",
                                              n == 0 ? "end of file"
                                                     : std::strerror(errno)));
    }
    XXH3_64bits_update(state.get(), buf.data(), static_cast<size_t>(n));
    at += static_cast<uint64_t>(n);
  }
  s.hashed = XXH3_64bits_digest(state.get());
  return s;
}

}  // namespace

absl::Status VerifyCheckpointFiles(const std::string& dir,
                                   const CheckpointManifest& manifest,
                                   bool full) {
  const std::string folder =
      absl::StrCat(dir, "/", CheckpointFolderName(manifest.step));
  for (const CheckpointShardEntry& e : manifest.shards) {
    const std::string path = absl::StrCat(folder, "/", e.file);
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(path, ": ", why));
    };
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bad(std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return bad(std::strerror(err));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size != e.bytes || size < 8) {
      close(fd);
      return bad(absl::StrCat(size, " bytes, the manifest says ", e.bytes));
    }
    absl::StatusOr<FileSums> sums = ReadSums(fd, size, full);
    close(fd);
    if (!sums.ok()) return bad(std::string(sums.status().message()));
    if (sums->trailer != e.checksum || (full && sums->hashed != e.checksum)) {
      return bad(absl::StrCat("its checksum is not the manifest's (",
                              full ? "contents" : "trailer", " differ)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointCheck>> CheckCheckpoints(
    const std::string& dir, bool full) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> steps, ListCheckpoints(dir));
  std::vector<CheckpointCheck> out;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    CheckpointCheck c;
    c.step = *it;
    absl::StatusOr<CheckpointManifest> m = ReadCheckpointManifest(dir, *it);
    c.status = m.ok() ? VerifyCheckpointFiles(dir, *m, full) : m.status();
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace zeroshard
