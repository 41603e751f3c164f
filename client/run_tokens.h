// Credentials a launcher (zeroshard-train, the Python front-end) makes for
// a local cluster that has none configured: one random bearer token per
// role, so that even the default run on one machine is not open to every
// local user (docs/DESIGN.md, "Security"). Part of the client library's
// public API.
//
//   ASSIGN_OR_RETURN(std::string dir, MakeRunTokens(out_dir + "/credentials"));
//   // dir/tokens (the servers' table), dir/worker.token, dir/ctl.token,
//   // dir/admin.token; the directory is 0700 and the files 0600.
#ifndef ZEROSHARD_CLIENT_RUN_TOKENS_H_
#define ZEROSHARD_CLIENT_RUN_TOKENS_H_

#include <string>

#include "absl/status/statusor.h"

namespace zeroshard {

// `bytes` random bytes from the kernel (getrandom), as lowercase hex.
absl::StatusOr<std::string> RandomHex(size_t bytes);

// Writes fresh tokens into `dir` (created 0700 if missing; existing token
// files are replaced atomically). Returns the absolute path of `dir`.
absl::StatusOr<std::string> MakeRunTokens(const std::string& dir);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_RUN_TOKENS_H_
