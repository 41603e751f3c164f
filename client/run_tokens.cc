#include "client/run_tokens.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"

namespace zeroshard {

absl::StatusOr<std::string> RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(raw);
}

absl::StatusOr<std::string> MakeRunTokens(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  if (::chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot chmod 0700 ", dir, ": ", std::strerror(errno)));
  }
  std::string table =
      "# role token: made by zeroshard-train for this run's local cluster\n";
  for (const char* role : {"worker", "ctl", "admin"}) {
    ASSIGN_OR_RETURN(const std::string token, RandomHex(32));
    absl::StrAppend(&table, role, " ", token, "\n");
    const std::string path = absl::StrCat(dir, "/", role, ".token");
    RETURN_IF_ERROR(WriteFileAtomically(path, token + "\n"));
    ::chmod(path.c_str(), 0600);  // the 0700 directory already hides it
  }
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/tokens", table));
  ::chmod((dir + "/tokens").c_str(), 0600);
  return fs::absolute(dir).string();
}

}  // namespace zeroshard
