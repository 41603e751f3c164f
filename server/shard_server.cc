#include "server/shard_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "wire/grpc_tuning.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/authorizer.h"
#include "server/shard_service_impl.h"
#include "wire/credentials.h"

namespace zeroshard {

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(
    Options options) {
  if (options.num_servers == 0 ||
      options.server_index >= options.num_servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--server_index (", options.server_index,
        ") must be < --num_servers (", options.num_servers, ")"));
  }
  RETURN_IF_ERROR(CheckPlacementAvailable(options.placement));
  std::shared_ptr<grpc::ServerCredentials> transport =
      grpc::InsecureServerCredentials();
  std::shared_ptr<Authorizer> authorizer;
  bool tls = false;
  if (!options.credentials_dir.empty()) {
    ASSIGN_OR_RETURN(auto server_tls, LoadServerTls(options.credentials_dir,
                                                     options.certificate_refresh));
    if (server_tls.has_value()) {
      transport = *std::move(server_tls);
      tls = true;
    }
    Authorizer::Options auth;
    auth.tls = tls;
    const std::string tokens = options.credentials_dir + "/tokens";
    std::error_code ec;
    if (std::filesystem::exists(tokens, ec)) auth.tokens_file = tokens;
    if (!tls && auth.tokens_file.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "credentials directory '", options.credentials_dir,
          "' holds neither server.pem/server.key/ca.pem nor tokens"));
    }
    ASSIGN_OR_RETURN(authorizer, Authorizer::Create(std::move(auth)));
  }
  std::unique_ptr<ShardServer> server(new ShardServer());
  server->options_ = options;
  server->tls_ = tls;
  if (options.metrics != nullptr) {
    server->metrics_ =
        std::make_unique<ServerMetrics>(options.metrics, options.placement);
  }
  server->service_ = std::make_unique<ShardServiceImpl>(ShardServiceImpl::Config{
      .identity = {options.server_index, options.num_servers},
      .placement = options.placement,
      .authorizer = std::move(authorizer),
      .max_pending_grad_bytes = options.max_pending_grad_bytes,
      .push_idle_timeout = options.push_idle_timeout,
      .metrics = server->metrics_.get(),
      .on_state_lost =
          [srv = server.get()](const absl::Status& fault) {
            ZS_LOG(ERROR) << fault << "; reporting NOT_SERVING";
            if (srv->server_ != nullptr) {
              srv->server_->GetHealthCheckService()->SetServingStatus(false);
            }
          }});
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ApplyServerTuning(builder);
  if (server->metrics_ != nullptr) {
    builder.experimental().SetInterceptorCreators(
        server->metrics_->Interceptors());
  }
  builder.AddListeningPort(options.listen_address, transport, &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    if (server->server_ != nullptr) server->server_->Shutdown();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", options.listen_address,
        "' (address in use, or not a valid HOST:PORT)"));
  }
  if (server->metrics_ != nullptr) {
    server->collector_id_ = options.metrics->AddCollector(
        [metrics = server->metrics_.get(), service = server->service_.get()] {
          metrics->Collect(*service);
        });
  }
  return server;
}

ShardServer::~ShardServer() {
  Shutdown(absl::ZeroDuration());
  if (collector_id_ != 0) options_.metrics->RemoveCollector(collector_id_);
}

void ShardServer::Shutdown(absl::Duration grace) {
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  }
}

absl::StatusOr<std::shared_ptr<ModelShard>> ShardServer::StateForTesting()
    const {
  return service_->state();
}

void ShardServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace zeroshard
