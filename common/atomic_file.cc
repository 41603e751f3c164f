#include "common/atomic_file.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view bytes) {
  // The pid keeps two processes writing the same path from sharing a
  // temporary file.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", tmp));
  }
  const bool written =
      std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !written) {
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::DataLossError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
