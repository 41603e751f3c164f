// zeroshard-server: one shard server process.
//
//   zeroshard-server --listen=127.0.0.1:0 --server_index=0 --num_servers=2
//       --credentials=DIR [--placement=host|pinned|device] [--cuda_device=K]
//       [--port_file=F]
//       [--max_pending_grad_mib=M] [--push_idle_timeout_s=T]
//       [--metrics_listen=HOST:PORT [--metrics_port_file=F]]
//
// Prints "zeroshard-server listening on HOST:PORT" once serving, writes the
// port to --port_file atomically (temporary file + rename), and shuts down
// gracefully on SIGTERM or SIGINT. With --metrics_listen it serves
// Prometheus metrics (server/server_metrics.h, common/process_metrics.h) at
// http://HOST:PORT/metrics, logs the bound port and writes it to
// --metrics_port_file. Every log line names the process ("server K").
//
// Security (docs/DESIGN.md, "Security"): --credentials=DIR names a directory
// of credential files (wire/credentials.h), never secrets themselves. With
// ca.pem, server.pem and server.key the port speaks mutual TLS; with a
// `tokens` table, callers may authenticate with bearer tokens. Without
// --credentials the server refuses to start unless --no_auth (every caller
// is admin) and the address resolves to loopback only. Plain TCP on a
// non-loopback address needs --plaintext, and is warned about.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "common/command_line.h"
#include "common/atomic_file.h"
#include "common/malloc_tuning.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/process_flags.h"
#include "common/process_metrics.h"
#include "server/device_transfer.h"
#include "server/shard_server.h"
#include "wire/credentials.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "HOST:PORT to listen on; port 0 picks a free port");
ABSL_FLAG(uint32_t, server_index, 0, "index K of this server, in [0, S)");
ABSL_FLAG(uint32_t, num_servers, 1, "number of servers S in the cluster");
ABSL_FLAG(std::string, placement, "host",
          "where the state lives: host, pinned (cudaHostAlloc) or device");
ABSL_FLAG(int, cuda_device, 0,
          "with --placement=device or pinned: the CUDA device K the state "
          "lives on (or is pinned for)");
ABSL_FLAG(bool, no_auth, false,
          "serve without any authentication (loopback addresses only; tests)");
ABSL_FLAG(std::string, port_file, "",
          "when set, the bound port is written here (atomically) once serving");
ABSL_FLAG(uint64_t, max_pending_grad_mib, 0,
          "cap on gradient MiB buffered awaiting commits, over all PushGrad "
          "streams; 0: twice one step's FP32 gradients for the owned range "
          "plus 64 MiB");
ABSL_FLAG(double, push_idle_timeout_s, 60,
          "a PushGrad stream that waits longer than this for its next "
          "message is failed and its buffered gradients freed; 0: never");
ABSL_FLAG(bool, plaintext, false,
          "allow plain TCP (no TLS) on a non-loopback --listen address");

namespace {

// The host part of HOST:PORT ("[::1]:0" -> "::1").
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

int Fail(const std::string& message) {
  std::cerr << "zeroshard-server: " << message << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const zeroshard::CommandLine cl = zeroshard::ParseProgramFlags(
      argc, argv, "zeroshard-server",
      "zeroshard-server --listen=HOST:PORT --server_index=K --num_servers=S "
      "--credentials=DIR [--placement=host|pinned|device]");
  if (cl.exit_code.has_value()) return *cl.exit_code;
  zeroshard::SetLogIdentity(
      absl::StrCat("server ", absl::GetFlag(FLAGS_server_index)));
  zeroshard::TuneMallocForLargeBuffers();

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  zeroshard::ShardServer::Options options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.server_index = absl::GetFlag(FLAGS_server_index);
  options.num_servers = absl::GetFlag(FLAGS_num_servers);
  options.credentials_dir = absl::GetFlag(FLAGS_credentials);
  const uint64_t pending_mib = absl::GetFlag(FLAGS_max_pending_grad_mib);
  if (pending_mib > (uint64_t{1} << 40)) {
    return Fail(absl::StrCat("--max_pending_grad_mib=", pending_mib,
                             " is out of range (at most 2^40)"));
  }
  options.max_pending_grad_bytes = pending_mib << 20;
  const double idle_s = absl::GetFlag(FLAGS_push_idle_timeout_s);
  if (!(idle_s >= 0) || idle_s > 1e6) {
    return Fail(absl::StrCat("--push_idle_timeout_s=", idle_s,
                             " is out of range [0, 1e6]"));
  }
  options.push_idle_timeout =
      idle_s == 0 ? absl::InfiniteDuration() : absl::Seconds(idle_s);
  const std::string host = HostOf(options.listen_address);
  const bool loopback = zeroshard::ResolvesToLoopbackOnly(host);
  if (options.credentials_dir.empty()) {
    if (!absl::GetFlag(FLAGS_no_auth)) {
      return Fail(
          "no --credentials: pass --credentials=DIR (see "
          "scripts/make-dev-credentials.sh), or --no_auth to serve without "
          "authentication on a loopback address");
    }
    if (!loopback) {
      return Fail(absl::StrCat("--no_auth is allowed only on a loopback "
                               "address; --listen=",
                               options.listen_address, " is not one"));
    }
    ZS_LOG(WARNING) << "--no_auth: every caller on " << host
                    << " may call every method, Init and SetWeights included";
  }
  const bool has_tls = !options.credentials_dir.empty() &&
                       std::filesystem::exists(options.credentials_dir +
                                               "/server.pem");
  if (!has_tls && !loopback) {
    if (!absl::GetFlag(FLAGS_plaintext)) {
      return Fail(absl::StrCat(
          "--listen=", options.listen_address,
          " is not a loopback address and --credentials has no TLS "
          "certificate (server.pem); pass --plaintext to serve plain TCP on "
          "it anyway"));
    }
    ZS_LOG(WARNING) << "--plaintext: serving plain TCP on "
                    << options.listen_address
                    << "; tokens and weights cross the network unencrypted";
  }
  absl::StatusOr<zeroshard::Placement> placement =
      zeroshard::ParsePlacement(absl::GetFlag(FLAGS_placement));
  if (!placement.ok()) return Fail(placement.status().ToString());
  options.placement = *placement;
  if (*placement != zeroshard::Placement::kHost) {
    const absl::Status device =
        zeroshard::SelectStateDevice(absl::GetFlag(FLAGS_cuda_device));
    if (!device.ok()) return Fail(device.ToString());
  }

  // Declared before the server and the HTTP endpoint: both use it.
  zeroshard::MetricsRegistry metrics;
  if (zeroshard::MetricsRequested()) {
    zeroshard::AddProcessMetrics(&metrics);
    options.metrics = &metrics;
  }
  absl::StatusOr<std::unique_ptr<zeroshard::ShardServer>> server =
      zeroshard::ShardServer::Start(options);
  if (!server.ok()) return Fail(server.status().ToString());
  const int port = (*server)->port();
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    const absl::Status written =
        zeroshard::WriteFileAtomically(port_file, absl::StrCat(port, "\n"));
    if (!written.ok()) {
      return Fail(absl::StrCat("cannot write --port_file=", port_file, ": ",
                               written.message()));
    }
  }
  absl::StatusOr<std::unique_ptr<zeroshard::MetricsHttpServer>> metrics_http =
      zeroshard::ServeMetricsFromFlags(&metrics);
  if (!metrics_http.ok()) return Fail(std::string(metrics_http.status().message()));
  std::cout << "zeroshard-server listening on "
            << (host.find(':') != std::string::npos ? absl::StrCat("[", host, "]")
                                                    : host)
            << ":" << port << std::endl;

  int sig = 0;
  sigwait(&stop, &sig);
  ZS_LOG(INFO) << "signal " << sig << ": shutting down";
  (*server)->Shutdown();
  (*server)->Wait();
  return 0;
}
