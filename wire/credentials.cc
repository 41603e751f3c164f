#include "wire/credentials.h"

#include <arpa/inet.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/client_interceptor.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "wire/tls_version.h"

namespace zeroshard {
namespace {

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// Adds "authorization: Bearer <token>" to every call of a channel.
class BearerTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const ClientSecurity* security)
      : security_(security) {}  // kept alive by the factory
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      absl::StatusOr<std::string> token = security_->Token();
      if (token.ok() && !token->empty()) {
        methods->GetSendInitialMetadata()->emplace(
            kAuthorizationKey, absl::StrCat(kBearerPrefix, *token));
      }
    }
    methods->Proceed();
  }

 private:
  const ClientSecurity* security_;
};

class BearerTokenInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(
      std::shared_ptr<const ClientSecurity> security)
      : security_(std::move(security)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(security_.get());
  }

 private:
  std::shared_ptr<const ClientSecurity> security_;
};

int RefreshSeconds(absl::Duration refresh) {
  return static_cast<int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kCtl:
      return "ctl";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role r : {Role::kWorker, Role::kCtl, Role::kAdmin}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", name, "' is not a role; want worker, ctl or admin"));
}

absl::StatusOr<std::shared_ptr<const ClientSecurity>> ClientSecurity::Load(
    const std::string& dir, Role role, absl::Duration refresh) {
  // A directory this user may not read is said to be one, not reported as
  // missing or empty.
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    const int err = errno;
    if (err == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(
          "credentials directory '", dir, "': ", std::strerror(err)));
    }
    return absl::NotFoundError(
        absl::StrCat("credentials directory '", dir, "' does not exist"));
  }
  if (access(dir.c_str(), R_OK | X_OK) != 0) {
    const int err = errno;
    return absl::PermissionDeniedError(absl::StrCat(
        "credentials directory '", dir, "' cannot be read (", std::strerror(err),
        "; it belongs to uid ", st.st_uid, ", mode ",
        absl::StrFormat("%04o", st.st_mode & 07777),
        "): run as its owner, or give a copy this user can read"));
  }
  const std::string name(RoleName(role));
  const std::string ca = dir + "/ca.pem";
  const std::string cert = absl::StrCat(dir, "/", name, ".pem");
  const std::string key = absl::StrCat(dir, "/", name, ".key");
  const std::string token = absl::StrCat(dir, "/", name, ".token");
  std::shared_ptr<ClientSecurity> s(new ClientSecurity());
  s->role_ = role;
  if (Exists(token)) {
    s->token_ = std::make_unique<WatchedFile>(token);
    absl::StatusOr<std::string> first = s->Token();
    if (!first.ok()) return first.status();
    if (first->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(token, " is empty"));
    }
  }
  if (Exists(ca)) {
    std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider>
        provider;
    const bool identity = Exists(cert) && Exists(key);
    if (Exists(cert) != Exists(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, " has only one of ", name, ".pem and ", name,
          ".key; a client certificate needs both"));
    }
    if (identity) {
      provider =
          std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
              key, cert, ca, RefreshSeconds(refresh));
    } else {
      provider =
          std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
              ca, RefreshSeconds(refresh));
    }
    if (absl::Status t = RequireTls13(); !t.ok()) return t;
    s->provider_ = std::move(provider);
    s->identity_ = identity;
    s->tls_ = true;
    if (s->channel_credentials() == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot build TLS credentials from ", dir));
    }
  } else {
    if (s->token_ == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "credentials directory '", dir, "' has neither ca.pem nor ", name,
          ".token"));
    }
    s->insecure_ = grpc::InsecureChannelCredentials();
  }
  return std::shared_ptr<const ClientSecurity>(std::move(s));
}

std::shared_ptr<grpc::ChannelCredentials> ClientSecurity::channel_credentials()
    const {
  if (!tls_) return insecure_;
  static std::atomic<uint64_t> next_name{0};
  const std::string name =
      absl::StrCat("zeroshard-channel-", next_name.fetch_add(1));
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider_);
  options.watch_root_certs();
  options.set_root_cert_name(name);
  if (identity_) {
    options.watch_identity_key_cert_pairs();
    options.set_identity_cert_name(name);
  }
  options.set_verify_server_certs(true);
  return grpc::experimental::TlsCredentials(options);
}

absl::StatusOr<std::string> ClientSecurity::Token() const {
  if (token_ == nullptr) return std::string();
  absl::StatusOr<std::shared_ptr<const std::string>> text = token_->Get();
  if (!text.ok()) return text.status();
  return std::string(absl::StripAsciiWhitespace(**text));
}

std::shared_ptr<grpc::Channel> CreateClientChannel(
    const std::string& target, grpc::ChannelArguments args,
    std::shared_ptr<const ClientSecurity> security) {
  if (security == nullptr) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                     args);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (security->has_token()) {
    interceptors.push_back(
        std::make_unique<BearerTokenInterceptorFactory>(security));
  }
  std::shared_ptr<grpc::ChannelCredentials> transport =
      security->channel_credentials();
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, transport, args, std::move(interceptors));
}

absl::StatusOr<std::optional<std::shared_ptr<grpc::ServerCredentials>>>
LoadServerTls(const std::string& dir, absl::Duration refresh) {
  const std::string ca = dir + "/ca.pem";
  const std::string cert = dir + "/server.pem";
  const std::string key = dir + "/server.key";
  const int present = Exists(ca) + Exists(cert) + Exists(key);
  if (present == 0) return std::nullopt;
  if (present != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " holds some of ca.pem, server.pem and server.key but not all "
        "three; TLS needs every one (missing: ",
        Exists(ca) ? "" : "ca.pem ", Exists(cert) ? "" : "server.pem ",
        Exists(key) ? "" : "server.key", ")"));
  }
  if (absl::Status s = RequireTls13(); !s.ok()) return s;
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          key, cert, ca, RefreshSeconds(refresh));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  std::shared_ptr<grpc::ServerCredentials> creds =
      grpc::experimental::TlsServerCredentials(options);
  if (creds == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot build TLS server credentials from ", dir));
  }
  return creds;
}

bool ResolvesToLoopbackOnly(const std::string& host) {
  if (host.empty()) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return false;
  bool any = false;
  bool all_loopback = true;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    any = true;
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all_loopback &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      all_loopback &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) != 0;
    } else {
      all_loopback = false;
    }
  }
  ::freeaddrinfo(result);
  return any && all_loopback;
}

}  // namespace zeroshard
