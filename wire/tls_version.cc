#include "wire/tls_version.h"

#include <openssl/bio.h>
#include <openssl/conf.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

// The section OpenSSL applies to every SSL_CTX it makes from now on. It
// replaces the ssl_conf module's settings of the system configuration
// (Debian's holds CipherString = DEFAULT:@SECLEVEL=2, OpenSSL 3's default
// anyway).
constexpr char kConfig[] =
    "zeroshard_tls = zeroshard_tls_init\n"
    "[zeroshard_tls_init]\n"
    "ssl_conf = zeroshard_tls_ssl\n"
    "[zeroshard_tls_ssl]\n"
    "system_default = zeroshard_tls_default\n"
    "[zeroshard_tls_default]\n"
    "MinProtocol = TLSv1.3\n"
    "Protocol = -TLSv1.2\n";

std::string OpenSslError() {
  char buf[256];
  const unsigned long e = ERR_get_error();
  if (e == 0) return "no OpenSSL error recorded";
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::Status Load() {
  // The system configuration first (once per process), so that a later
  // initialisation by gRPC loads nothing over what follows.
  if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) {
    return absl::InternalError(
        absl::StrCat("TLS: OpenSSL did not initialise: ", OpenSslError()));
  }
  CONF* conf = NCONF_new(nullptr);
  BIO* bio = BIO_new_mem_buf(kConfig, -1);
  absl::Status status;
  long line = 0;
  if (conf == nullptr || bio == nullptr ||
      NCONF_load_bio(conf, bio, &line) <= 0) {
    status = absl::InternalError(absl::StrCat(
        "TLS: the TLS 1.3 configuration does not load (line ", line,
        "): ", OpenSslError()));
  } else if (CONF_modules_load(conf, "zeroshard_tls", 0) <= 0) {
    status = absl::InternalError(absl::StrCat(
        "TLS: OpenSSL refused the TLS 1.3 configuration: ", OpenSslError()));
  }
  BIO_free(bio);
  NCONF_free(conf);
  return status;
}

}  // namespace

absl::Status RequireTls13() {
  static const absl::Status* const result = new absl::Status(Load());
  return *result;
}

}  // namespace zeroshard
