#include "common/process_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/logging.h"

ABSL_FLAG(std::string, credentials, "",
          "credentials directory (docs/DESIGN.md, \"Security\"): ca.pem with "
          "this process's certificate and key for mutual TLS (a server's "
          "server.pem/.key, a client's <role>.pem/.key) and/or bearer tokens "
          "(a server's tokens table, a client's <role>.token); empty: none");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on (GET /metrics, plain "
          "HTTP); port 0 picks a free port; empty: no metrics");
ABSL_FLAG(std::string, metrics_port_file, "",
          "when set with --metrics_listen, the bound metrics port is written "
          "here (atomically)");

namespace zeroshard {

bool MetricsRequested() { return !absl::GetFlag(FLAGS_metrics_listen).empty(); }

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetricsFromFlags(
    MetricsRegistry* registry) {
  const std::string listen = absl::GetFlag(FLAGS_metrics_listen);
  if (listen.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
      MetricsHttpServer::Start(listen, registry);
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("--metrics_listen: ",
                                     http.status().message()));
  }
  ZS_LOG(INFO) << "serving metrics on port " << (*http)->port()
               << " (--metrics_listen=" << listen << ")";
  const std::string port_file = absl::GetFlag(FLAGS_metrics_port_file);
  if (!port_file.empty()) {
    const absl::Status written =
        WriteFileAtomically(port_file, absl::StrCat((*http)->port(), "\n"));
    if (!written.ok()) {
      return absl::Status(written.code(),
                          absl::StrCat("cannot write --metrics_port_file=",
                                       port_file, ": ", written.message()));
    }
  }
  return http;
}

}  // namespace zeroshard
