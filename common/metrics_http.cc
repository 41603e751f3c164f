#include "common/metrics_http.h"

#include <httplib.h>

#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace zeroshard {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";
// Threads answering scrapes: Prometheus scrapes one target serially.
constexpr size_t kThreads = 2;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, MetricsRegistry* registry) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535 || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", listen, "' is not HOST:PORT (e.g. 0.0.0.0:9400)"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->http_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->http_;
  http.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  http.Get("/metrics", [registry](const httplib::Request&,
                                  httplib::Response& response) {
    response.set_content(registry->Render(), kContentType);
  });
  if (port == 0) {
    port = http.bind_to_any_port(host);
  } else if (!http.bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for metrics on '", listen,
        "' (address in use, or not a valid HOST:PORT)"));
  }
  server->port_ = port;
  server->thread_ = std::thread([&http] { http.listen_after_bind(); });
  // stop() before the loop has started would be lost: wait (bounded) until
  // it runs.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!http.is_running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!http.is_running()) {
    http.stop();
    server->thread_.detach();  // cannot join a loop that may never end
    server->http_.release();   // the detached thread may still use it
    return absl::InternalError("the metrics HTTP server did not start");
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace zeroshard
