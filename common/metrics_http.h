// Serves a MetricsRegistry over HTTP for Prometheus: GET /metrics answers
// the text exposition format 0.0.4 (common/metrics.h); anything else is 404.
// Built on cpp-httplib (Debian's libcpp-httplib-dev), in a target of its
// own (zs_metrics_http) so that only the programs that serve metrics link it.
//
//   MetricsRegistry registry;
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> http,
//                    MetricsHttpServer::Start("127.0.0.1:0", &registry));
//   ZS_LOG(INFO) << "metrics on port " << http->port();
//   ...   // the destructor stops serving
//
// Plain HTTP with no authentication, as Prometheus scrapes it: the metrics
// hold counts and sizes, never weights or credentials.
#ifndef ZEROSHARD_COMMON_METRICS_HTTP_H_
#define ZEROSHARD_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace httplib {
class Server;
}

namespace zeroshard {

class MetricsHttpServer {
 public:
  // Listens on `listen` (HOST:PORT, "[::1]:0"; port 0 picks a free one) and
  // serves `registry`, which outlives the server. INVALID_ARGUMENT for an
  // address that is not HOST:PORT, UNAVAILABLE when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, MetricsRegistry* registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port.
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_METRICS_HTTP_H_
