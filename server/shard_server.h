// A running shard server: the ShardService plus the standard
// grpc.health.v1 service, listening on one address.
//
//   ShardServer::Options options;
//   options.listen_address = "127.0.0.1:0";   // port 0: the OS picks
//   ASSIGN_OR_RETURN(std::unique_ptr<ShardServer> server,
//                    ShardServer::Start(options));
//   ConnectTo(absl::StrCat("127.0.0.1:", server->port()));
//   ...
//   server->Shutdown();   // also done by the destructor
//
// Start fails (nothing left listening) for a bad identity, a placement this
// machine cannot provide (FAILED_PRECONDITION naming --placement) or an
// address that cannot be bound (UNAVAILABLE), or unusable credentials
// (INVALID_ARGUMENT / NOT_FOUND naming the file). The transport is TLS when
// the credentials directory has certificates, plain TCP otherwise; main
// refuses plain TCP on a non-loopback address unless told --plaintext.
#ifndef ZEROSHARD_SERVER_SHARD_SERVER_H_
#define ZEROSHARD_SERVER_SHARD_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "server/model_shard.h"
#include "server/placement.h"
#include "server/server_metrics.h"
#include "wire/credentials.h"

namespace zeroshard {

class ShardServiceImpl;

class ShardServer {
 public:
  struct Options {
    // HOST:PORT; port 0 picks a free port (see port()).
    std::string listen_address = "127.0.0.1:0";
    uint32_t server_index = 0;
    uint32_t num_servers = 1;
    Placement placement = Placement::kHost;
    // The credentials directory (wire/credentials.h): TLS when it holds
    // ca.pem, server.pem and server.key; bearer tokens when it holds
    // `tokens`. Empty: open, every caller is admin (tests; zeroshard-server
    // allows it only with --no_auth on a loopback address).
    std::string credentials_dir;
    // How often certificate files are re-read (rotation without restart).
    absl::Duration certificate_refresh = kCertificateRefresh;
    // Cap on gradient bytes buffered awaiting commits (all streams); 0: twice
    // one step's FP32 gradients for the owned range plus 64 MiB.
    uint64_t max_pending_grad_bytes = 0;
    // A PushGrad stream waiting longer than this for its next message is
    // failed (DEADLINE_EXCEEDED) and its buffers freed; infinite: never.
    absl::Duration push_idle_timeout = absl::Seconds(60);
    // When set, the server's metrics (server/server_metrics.h) are kept in
    // it: every RPC is timed, and each Render reads the state. Outlives the
    // server.
    MetricsRegistry* metrics = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(Options options);
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // The bound port.
  int port() const { return port_; }
  // Whether the listening port uses TLS.
  bool tls() const { return tls_; }
  const Options& options() const { return options_; }
  // Stops accepting calls, cancels calls still running after `grace`, and
  // returns when all are done. Idempotent; thread-safe.
  void Shutdown(absl::Duration grace = absl::Seconds(2));
  // Blocks until Shutdown has completed (from another thread).
  void Wait();
  // The initialized shard (tests); FAILED_PRECONDITION before Init.
  absl::StatusOr<std::shared_ptr<ModelShard>> StateForTesting() const;

 private:
  ShardServer() = default;

  Options options_;
  int port_ = 0;
  bool tls_ = false;
  // Before service_: the snapshots the service owns may still report to it.
  std::unique_ptr<ServerMetrics> metrics_;
  int collector_id_ = 0;  // in options_.metrics; 0: none
  std::unique_ptr<ShardServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARD_SERVER_H_
