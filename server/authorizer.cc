#include "server/authorizer.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace zeroshard {
namespace {

constexpr size_t kMinTokenChars = 16;

// Compares every byte so that the time does not reveal a matching prefix.
bool SecretsEqual(absl::string_view a, absl::string_view b) {
  unsigned diff = a.size() != b.size();
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// The role a certificate names in its CN or a SAN, if any.
std::optional<Role> RoleOfCertificate(const grpc::AuthContext& auth) {
  for (const char* property :
       {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : auth.FindPropertyValues(property)) {
      absl::StatusOr<Role> role =
          ParseRole(absl::string_view(value.data(), value.size()));
      if (role.ok()) return *role;
    }
  }
  return std::nullopt;
}

}  // namespace

bool RoleMayCall(Role role, absl::string_view method) {
  if (role == Role::kAdmin) return true;
  if (method == "Inspect") return true;
  if (role == Role::kWorker) {
    return method == "Gather" || method == "PushGrad" ||
           method == "ApplyStep" || method == "KvSet" || method == "KvGet" ||
           method == "KvWait" || method == "OpenRegion" ||
           method == "CloseRegion";
  }
  return false;
}

absl::StatusOr<std::vector<std::pair<Role, std::string>>> ParseTokenTable(
    absl::string_view text) {
  std::vector<std::pair<Role, std::string>> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token table line ", line_no, ": want \"<role> <token>\""));
    }
    absl::StatusOr<Role> role = ParseRole(fields[0]);
    if (!role.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token table line ", line_no, ": ", role.status().message()));
    }
    if (fields[1].size() < kMinTokenChars) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token table line ", line_no, ": the token is ", fields[1].size(),
          " characters; at least ", kMinTokenChars, " are required"));
    }
    out.emplace_back(*role, std::string(fields[1]));
  }
  return out;
}

Authorizer::Authorizer(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(
    Options options) {
  std::unique_ptr<Authorizer> a(new Authorizer(std::move(options)));
  if (!a->options_.tokens_file.empty()) {
    a->tokens_ = std::make_unique<WatchedFile>(a->options_.tokens_file);
    absl::StatusOr<std::optional<Role>> probe = a->RoleOfToken("");
    if (!probe.ok()) return probe.status();
  }
  return a;
}

absl::StatusOr<std::optional<Role>> Authorizer::RoleOfToken(
    absl::string_view token) {
  absl::StatusOr<std::shared_ptr<const std::string>> text = tokens_->Get();
  if (!text.ok()) return text.status();
  absl::MutexLock lock(&mu_);
  if (*text != parsed_from_) {
    absl::StatusOr<std::vector<std::pair<Role, std::string>>> table =
        ParseTokenTable(**text);
    if (!table.ok()) {
      if (parsed_from_ == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(tokens_->path(), ": ", table.status().message()));
      }
      ZS_LOG(WARNING) << "keeping the previous token table: "
                      << tokens_->path() << ": " << table.status().message();
    } else {
      table_ = *std::move(table);
    }
    parsed_from_ = *text;
  }
  std::optional<Role> found;
  for (const auto& [role, secret] : table_) {
    if (SecretsEqual(token, secret) && !found.has_value()) found = role;
  }
  return found;
}

absl::StatusOr<Role> Authorizer::Authenticate(
    const grpc::ServerContextBase& context) {
  if (open()) return Role::kAdmin;
  if (options_.tls) {
    std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      if (std::optional<Role> role = RoleOfCertificate(*auth)) return *role;
    }
  }
  if (tokens_ != nullptr) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kAuthorizationKey);
    if (it != metadata.end()) {
      absl::string_view value(it->second.data(), it->second.size());
      if (!absl::ConsumePrefix(&value, kBearerPrefix)) {
        return absl::UnauthenticatedError(
            "the authorization metadata is not \"Bearer <token>\"");
      }
      absl::StatusOr<std::optional<Role>> role = RoleOfToken(value);
      if (!role.ok()) {
        return absl::UnavailableError(absl::StrCat(
            "the server cannot read its token table: ", role.status().message()));
      }
      if (role->has_value()) return **role;
      return absl::UnauthenticatedError("the bearer token matches no role");
    }
  }
  return absl::UnauthenticatedError(
      options_.tls ? "the client certificate names no role (CN or SAN "
                     "worker, ctl or admin) and no bearer token was sent"
                   : "no bearer token was sent (authorization metadata): "
                     "give the client the run's credentials (zeroshard-ctl "
                     "--credentials=DIR; a zeroshard-train run keeps them in "
                     "<out>/credentials, which --cluster=<out> reads)");
}

absl::Status Authorizer::Authorize(const grpc::ServerContextBase& context,
                                   absl::string_view method) {
  absl::StatusOr<Role> role = Authenticate(context);
  if (!role.ok()) {
    return absl::Status(role.status().code(),
                        absl::StrCat(method, ": ", role.status().message()));
  }
  if (!RoleMayCall(*role, method)) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, " is not allowed for role ", RoleName(*role)));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
