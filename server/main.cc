// zeroshard-server: one shard server process.
//
//   zeroshard-server --listen=127.0.0.1:0 --server_index=0 --num_servers=2
//       [--placement=host|pinned|device] [--admin_token=T] [--port_file=F]
//       [--max_pending_grad_mib=M]
//
// Prints "zeroshard-server listening on HOST:PORT" once serving, writes the
// port to --port_file atomically (temporary file + rename), and shuts down
// gracefully on SIGTERM or SIGINT. The transport is plain TCP: a
// non-loopback --listen address needs --insecure.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "common/atomic_file.h"
#include "common/malloc_tuning.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/shard_server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "HOST:PORT to listen on; port 0 picks a free port");
ABSL_FLAG(uint32_t, server_index, 0, "index K of this server, in [0, S)");
ABSL_FLAG(uint32_t, num_servers, 1, "number of servers S in the cluster");
ABSL_FLAG(std::string, placement, "host",
          "where the state lives: host, pinned (cudaHostAlloc) or device");
ABSL_FLAG(std::string, admin_token, "",
          "when set, Init/SetWeights/Checkpoint/Restore must carry it");
ABSL_FLAG(std::string, port_file, "",
          "when set, the bound port is written here (atomically) once serving");
ABSL_FLAG(uint64_t, max_pending_grad_mib, 0,
          "cap on gradient MiB buffered awaiting commits, over all PushGrad "
          "streams; 0: twice one step's FP32 gradients for the owned range "
          "plus 64 MiB");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --listen address without TLS");

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

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" ||
         absl::StartsWith(host, "127.");
}

int Fail(const std::string& message) {
  std::cerr << "zeroshard-server: " << message << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "zeroshard-server --listen=HOST:PORT --server_index=K --num_servers=S "
      "[--placement=host|pinned|device]");
  absl::ParseCommandLine(argc, argv);
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
  options.admin_token = absl::GetFlag(FLAGS_admin_token);
  const uint64_t pending_mib = absl::GetFlag(FLAGS_max_pending_grad_mib);
  if (pending_mib > (uint64_t{1} << 40)) {
    return Fail(absl::StrCat("--max_pending_grad_mib=", pending_mib,
                             " is out of range (at most 2^40)"));
  }
  options.max_pending_grad_bytes = pending_mib << 20;
  const std::string host = HostOf(options.listen_address);
  if (!IsLoopback(host) && !absl::GetFlag(FLAGS_insecure)) {
    return Fail(absl::StrCat(
        "--listen=", options.listen_address,
        " is not a loopback address and TLS is not available yet; pass "
        "--insecure to serve plain TCP on it anyway"));
  }
  absl::StatusOr<zeroshard::Placement> placement =
      zeroshard::ParsePlacement(absl::GetFlag(FLAGS_placement));
  if (!placement.ok()) return Fail(placement.status().ToString());
  options.placement = *placement;

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
