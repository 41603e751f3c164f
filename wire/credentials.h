// Who a process is on the wire, and the gRPC credentials that prove it
// (docs/DESIGN.md, "Security").
//
// A credentials directory (made for development by
// scripts/make-dev-credentials.sh; in Kubernetes, a mounted Secret) holds
//
//   ca.pem                       the CA that signs every certificate
//   server.pem, server.key       a shard server's certificate (SANs: its
//                                host names and addresses)
//   <role>.pem, <role>.key       a client certificate whose CN (or a SAN)
//                                is the role: worker, ctl or admin
//   <role>.token                 a bearer token for the role
//   tokens                       the servers' table: lines "<role> <token>"
//
// Any subset may be present: with ca.pem and a certificate pair, channels use
// mutual TLS (FileWatcherCertificateProvider: rotated files are picked up
// without a restart); with a <role>.token, every call carries
// "authorization: Bearer <token>", re-read when the file changes. Paths are
// given, never secrets: nothing secret appears on a command line.
//
//   ASSIGN_OR_RETURN(auto security, ClientSecurity::Load("/creds", Role::kWorker));
//   auto channel = CreateClientChannel("10.0.0.5:7000", args, security);
#ifndef ZEROSHARD_WIRE_CREDENTIALS_H_
#define ZEROSHARD_WIRE_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/watched_file.h"

namespace zeroshard {

// What a caller may do on a shard server (server/authorizer.h has the table).
enum class Role { kWorker, kCtl, kAdmin };

absl::string_view RoleName(Role role);
// "worker", "ctl", "admin"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Role> ParseRole(absl::string_view name);

// The metadata key of bearer tokens.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// How often the certificate files are re-read.
inline constexpr absl::Duration kCertificateRefresh = absl::Seconds(10);

class ClientSecurity {
 public:
  // Reads nothing secret yet: checks which files `dir` has for `role` and
  // builds TLS channel credentials when it has ca.pem (mutual TLS when
  // <role>.pem and <role>.key exist too). NOT_FOUND when `dir` does not
  // exist or holds neither ca.pem nor <role>.token; the token is read once
  // here so that a bad file fails at start, not at the first call.
  static absl::StatusOr<std::shared_ptr<const ClientSecurity>> Load(
      const std::string& dir, Role role,
      absl::Duration refresh = kCertificateRefresh);

  Role role() const { return role_; }
  bool tls() const { return tls_; }
  bool has_token() const { return token_ != nullptr; }
  // Credentials for one new channel. With TLS, each call builds its own
  // TlsCredentials over the one certificate provider, watching the
  // certificates under names no other channel uses: gRPC 1.51's
  // provider pushes its certificates to a name only when that name starts
  // being watched, so a channel whose watch began while a dropped
  // channel's watch of the same name was still being cancelled (gRPC
  // releases channels on its own threads) never received them and failed
  // every connection with "Failed to create security handshaker".
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials() const;
  // The current token ("" when none); re-read when the file changed.
  absl::StatusOr<std::string> Token() const;

 private:
  ClientSecurity() = default;
  Role role_ = Role::kCtl;
  bool tls_ = false;
  // Plaintext: the insecure credentials. TLS: the provider that every
  // channel's credentials watch, and whether it holds a client certificate.
  std::shared_ptr<grpc::ChannelCredentials> insecure_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  bool identity_ = false;
  std::unique_ptr<WatchedFile> token_;
};

// A channel to `target` with `args`. security == nullptr: plaintext and no
// token (tests, loopback tools). Otherwise TLS per `security` and a client
// interceptor that adds the bearer token to every call.
std::shared_ptr<grpc::Channel> CreateClientChannel(
    const std::string& target, grpc::ChannelArguments args,
    std::shared_ptr<const ClientSecurity> security);

// The server side: TLS server credentials requiring and verifying client
// certificates when `dir` has ca.pem, server.pem and server.key; nullopt
// when it has none of them; INVALID_ARGUMENT naming the missing file when it
// has some but not all.
// Certificate files are re-read every `refresh` (whole seconds, >= 1).
absl::StatusOr<std::optional<std::shared_ptr<grpc::ServerCredentials>>>
LoadServerTls(const std::string& dir,
              absl::Duration refresh = kCertificateRefresh);

// Whether every address `host` resolves to is a loopback address (127/8,
// ::1). The host of a listen address: "" and "0.0.0.0" / "::" are not.
bool ResolvesToLoopbackOnly(const std::string& host);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_CREDENTIALS_H_
