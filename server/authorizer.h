// Who may call what on a shard server (docs/DESIGN.md, "Security").
//
// Every RPC handler starts with Authorize(context, "Method"). The caller's
// role comes from its TLS client certificate (a CN or SAN that is exactly
// "worker", "ctl" or "admin") or else from an "authorization: Bearer" token
// found in the server's token table (lines "<role> <token>", re-read when
// the file changes). Then:
//
//   method                                       worker  ctl  admin
//   Gather, PushGrad, ApplyStep, KvSet/Get/Wait    yes    -    yes
//   Inspect                                        yes   yes   yes
//   Init, SetWeights, Checkpoint, Restore,
//   ReadSnapshot, StepLog, Replay                   -     -    yes
//
// No credentials, or a token that matches none: UNAUTHENTICATED. A role not
// allowed the method: PERMISSION_DENIED. Either is checked before the request
// is looked at, so a refused call changes nothing. An Authorizer built with
// neither TLS nor a token table is open (every caller is admin): for tests
// and for zeroshard-server --no_auth on loopback only.
//
//   ASSIGN_OR_RETURN(auto authz, Authorizer::Create({.tokens_file = f}));
//   RETURN_IF_ERROR(authz->Authorize(*context, "PushGrad"));
//
// Thread-safe.
#ifndef ZEROSHARD_SERVER_AUTHORIZER_H_
#define ZEROSHARD_SERVER_AUTHORIZER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/watched_file.h"
#include "wire/credentials.h"

namespace zeroshard {

// Whether `role` may call `method` (a ShardService method name).
bool RoleMayCall(Role role, absl::string_view method);

// Parses a token table: one "<role> <token>" per line, '#' comments and
// blank lines ignored. Tokens are at least 16 characters; a role may have
// several (rotation). INVALID_ARGUMENT naming the line otherwise.
absl::StatusOr<std::vector<std::pair<Role, std::string>>> ParseTokenTable(
    absl::string_view text);

class Authorizer {
 public:
  struct Options {
    // The token table ("" : no tokens).
    std::string tokens_file;
    // Client certificates are verified by TLS (the transport is mutual TLS).
    bool tls = false;
  };
  // Reads the token table once (a bad one fails here).
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(Options options);

  bool open() const { return !options_.tls && options_.tokens_file.empty(); }
  // The caller's role, or UNAUTHENTICATED.
  absl::StatusOr<Role> Authenticate(const grpc::ServerContextBase& context);
  // OK, UNAUTHENTICATED or PERMISSION_DENIED naming `method`.
  absl::Status Authorize(const grpc::ServerContextBase& context,
                         absl::string_view method);

 private:
  explicit Authorizer(Options options);
  absl::StatusOr<std::optional<Role>> RoleOfToken(absl::string_view token);

  const Options options_;
  std::unique_ptr<WatchedFile> tokens_;
  absl::Mutex mu_;
  // The parsed table and the file contents it came from.
  std::shared_ptr<const std::string> parsed_from_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<Role, std::string>> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_AUTHORIZER_H_
