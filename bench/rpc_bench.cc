// zeroshard-bench rpc: Gather and PushGrad throughput between this process
// and a zeroshard-server process over loopback, against a raw TCP socket pair
// (this process and a forked peer) moving the same bytes in the same message
// sizes, measured in the same run.
//
// The same Gather and PushGrad run again against a server speaking mutual
// TLS 1.3 (certificates from scripts/make-dev-credentials.sh in a temporary
// directory), alternating with the plaintext runs, and the TLS/plaintext
// ratio is printed (--no_tls skips it).
//
//   zeroshard-bench rpc [--bytes=1073741824] [--message_bytes=1048576]
//                       [--model_elems=33554432] [--no_tls]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/bench.h"
#include "client/shard_client.h"
#include "common/optimizer_config.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "tests/support/shard_load.h"  // MakeDevCredentials
#include "optim/optimizer.h"
#include "optim/optimizer_pool.h"
#include "wire/credentials.h"

namespace zeroshard::bench {
namespace {

struct RpcArgs {
  uint64_t bytes = 1ull << 30;
  uint64_t message_bytes = 1 << 20;
  uint64_t model_elems = 32ull << 20;
  bool tls = true;
};

bool ParseArgs(const std::vector<std::string>& args, RpcArgs* out) {
  for (const std::string& a : args) {
    absl::string_view v = a;
    uint64_t* target = nullptr;
    if (a == "--no_tls") {
      out->tls = false;
      continue;
    }
    if (absl::ConsumePrefix(&v, "--bytes=")) target = &out->bytes;
    else if (absl::ConsumePrefix(&v, "--message_bytes=")) target = &out->message_bytes;
    else if (absl::ConsumePrefix(&v, "--model_elems=")) target = &out->model_elems;
    if (target == nullptr || !absl::SimpleAtoi(v, target) || *target == 0) {
      std::fprintf(stderr, "rpc: bad argument '%s'\n", a.c_str());
      return false;
    }
  }
  if (out->message_bytes > (1 << 20) || out->model_elems % 64 != 0) {
    std::fprintf(stderr, "rpc: --message_bytes must be <= 1 MiB and "
                 "--model_elems a multiple of 64\n");
    return false;
  }
  return true;
}

double Gbps(uint64_t bytes, absl::Duration d) {
  return bytes / absl::ToDoubleSeconds(d) / 1e9;
}

// ---- raw TCP: this process and a forked peer ------------------------------

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}

bool ReadAll(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}

// The peer: 'S' n -> sends n bytes in messages; 'R' n -> reads n bytes, acks.
void PeerLoop(int fd, uint64_t message_bytes) {
  std::vector<uint8_t> buf(message_bytes, 7);
  while (true) {
    uint8_t cmd[9];
    if (!ReadAll(fd, cmd, 9) || cmd[0] == 'Q') return;
    uint64_t n;
    std::memcpy(&n, cmd + 1, 8);
    for (uint64_t at = 0; at < n; at += message_bytes) {
      const size_t m = std::min<uint64_t>(message_bytes, n - at);
      if (cmd[0] == 'S' ? !WriteAll(fd, buf.data(), m)
                        : !ReadAll(fd, buf.data(), m)) {
        return;
      }
    }
    if (cmd[0] == 'R') {
      uint8_t ack = 1;
      WriteAll(fd, &ack, 1);
    }
  }
}

struct TcpFigures {
  double recv_gbps = 0;  // peer -> us (like Gather)
  double send_gbps = 0;  // us -> peer (like PushGrad)
};

// The forked peer and our end of the socket pair. Started before any gRPC
// object exists, so fork() is safe; measured before and after the gRPC runs
// (the machine is shared and noisy), keeping the best of each direction.
class TcpPair {
 public:
  bool Start(const RpcArgs& a) {
    a_ = a;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(lfd, 1) != 0 ||
        getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("rpc: tcp listen");
      return false;
    }
    pid_ = fork();
    if (pid_ == 0) {
      int fd = accept(lfd, nullptr, nullptr);
      PeerLoop(fd, a.message_bytes);
      _exit(0);
    }
    close(lfd);
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("rpc: tcp connect");
      return false;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // The destination/source is a buffer as large as the gRPC one.
    buf_.assign(std::min<uint64_t>(a.bytes, a.model_elems * 4), 1);
    Run('S', a.bytes / 4);  // warm-up
    Run('R', a.bytes / 4);
    return true;
  }

  void Measure(TcpFigures* out) {
    out->recv_gbps = std::max(out->recv_gbps, Run('S', a_.bytes));
    out->send_gbps = std::max(out->send_gbps, Run('R', a_.bytes));
  }

  ~TcpPair() {
    if (fd_ >= 0) {
      uint8_t quit[9] = {'Q'};
      WriteAll(fd_, quit, 9);
      close(fd_);
    }
    if (pid_ > 0) {
      int status;
      waitpid(pid_, &status, 0);
    }
  }

 private:
  double Run(char op, uint64_t n) {
    uint8_t cmd[9] = {static_cast<uint8_t>(op)};
    std::memcpy(cmd + 1, &n, 8);
    WriteAll(fd_, cmd, 9);
    const absl::Time t0 = absl::Now();
    const size_t buf_bytes = buf_.size();
    uint64_t at = 0;
    while (at < n) {
      const size_t m = std::min<uint64_t>(a_.message_bytes, n - at);
      uint8_t* p = buf_.data() + at % (buf_bytes - m + 1);
      if (op == 'S' ? !ReadAll(fd_, p, m) : !WriteAll(fd_, p, m)) return -1.0;
      at += m;
    }
    if (op == 'R') {
      uint8_t ack;
      ReadAll(fd_, &ack, 1);
    }
    return Gbps(n, absl::Now() - t0);
  }

  RpcArgs a_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::vector<uint8_t> buf_;
};

// ---- gRPC: a zeroshard-server process -------------------------------------

// A zeroshard-server process and a client to it: plaintext (--no_auth) or
// mutual TLS (--credentials=DIR, client role worker; Init as admin).
class RpcTarget {
 public:
  absl::Status Start(const RpcArgs& a, const std::string& dir,
                     const std::string& credentials) {
    std::filesystem::create_directories(dir);
    SubprocessOptions so;
    so.argv = {SelfDir() + "/zeroshard-server", "--listen=127.0.0.1:0",
               "--port_file=" + dir + "/port",
               credentials.empty() ? std::string("--no_auth")
                                   : "--credentials=" + credentials};
    // Without this, glibc serves every 1 MiB message buffer from a fresh
    // mmap and both sides spend their time in page faults (measured:
    // PushGrad of a skipped step ~1.0 GB/s without, ~2.1 GB/s with, TCP
    // ~2.1).
    so.env = {{"MALLOC_MMAP_THRESHOLD_", "268435456"},
              {"MALLOC_TRIM_THRESHOLD_", "1073741824"},
              {"MALLOC_TOP_PAD_", "67108864"}};
    so.stdout_mode = SubprocessOptions::Output::kDiscard;
    so.stderr_mode = SubprocessOptions::Output::kFile;
    so.stderr_path = dir + "/server.log";
    ASSIGN_OR_RETURN(server_, Subprocess::Start(so));
    ASSIGN_OR_RETURN(const int port, WaitForPortFile(dir + "/port",
                                                     absl::Seconds(60),
                                                     server_.get()));
    ModelManifest manifest;
    manifest.units = {
        {"bench", {{"bench.w", {static_cast<int64_t>(a.model_elems)}}}}};
    ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::Create(manifest, 1, 1));
    ShardClientOptions opt;
    opt.max_message_bytes = a.message_bytes;
    opt.run_id = "rpc-bench";
    const std::vector<std::string> address = {
        absl::StrCat("127.0.0.1:", port)};
    if (!credentials.empty()) {
      ASSIGN_OR_RETURN(opt.security,
                       ClientSecurity::Load(credentials, Role::kAdmin));
      ASSIGN_OR_RETURN(auto admin, ShardClient::Create(address, layout, opt));
      RETURN_IF_ERROR(admin->Init(InitOptions()).status());
      ASSIGN_OR_RETURN(opt.security,
                       ClientSecurity::Load(credentials, Role::kWorker));
    }
    ASSIGN_OR_RETURN(client_, ShardClient::Create(address, layout, opt));
    if (credentials.empty()) {
      RETURN_IF_ERROR(client_->Init(InitOptions()).status());
    }
    T_ = layout.total_elems();
    params_.resize(T_);
    grads_.assign(T_, 1e-3f);
    return absl::OkStatus();
  }

  uint64_t elems() const { return T_; }

  double Gather(uint64_t bytes) {
    const absl::Time t0 = absl::Now();
    uint64_t moved = 0;
    const FlatRange all{0, T_};
    while (moved < bytes) {
      auto r = client_->Gather({{all}}, DType::kFp32, -1, params_.data(),
                               4 * T_);
      if (!r.ok()) {
        std::fprintf(stderr, "rpc: %s\n", r.status().ToString().c_str());
        return -1.0;
      }
      moved += 4 * T_;
    }
    return Gbps(moved, absl::Now() - t0);
  }

  double Push(uint64_t bytes, bool known, bool skip = false) {
    const absl::Time t0 = absl::Now();
    uint64_t moved = 0;
    const FlatRange all{0, T_};
    while (moved < bytes) {
      auto r = client_->PushGrad(step_++, 0,
                                 {{all, DType::kFp32, grads_.data()}},
                                 {1.0, skip}, known);
      if (!r.ok()) {
        std::fprintf(stderr, "rpc: %s\n", r.status().ToString().c_str());
        return -1.0;
      }
      moved += 4 * T_;
    }
    return Gbps(moved, absl::Now() - t0);
  }

  void Stop() {
    client_.reset();
    if (server_ != nullptr) server_->Stop(absl::Seconds(10));
  }

 private:
  std::unique_ptr<Subprocess> server_;
  std::unique_ptr<ShardClient> client_;
  uint64_t T_ = 0;
  uint64_t step_ = 0;
  std::vector<float> params_, grads_;
};

// The server's update alone, in this process: AdamW on n FP32 elements with
// an FP32 gradient on an optimizer pool of the cores, as the server runs
// it, best of `reps`; G params/s.
double UpdateAloneGparamsPerSecond(uint64_t n, int reps) {
  OptimizerPool pool(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<float> master(n, 0.1f), m(n, 0.0f), v(n, 0.0f), g(n, 1e-3f);
  std::vector<uint16_t> mirror(n, 0);
  const OptimizerConfig config;
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first warms the pages
    const AdamStep step = MakeAdamStep(config, static_cast<uint64_t>(r + 1), 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(n, size_t{1} << 15, [&](size_t lo, size_t hi) {
      AdamUpdate(step, GradView::Fp32(g.data() + lo),
                 {master.data() + lo, m.data() + lo, v.data() + lo,
                  mirror.data() + lo, hi - lo});
    });
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return static_cast<double>(n) / best / 1e9;
}

int RunRpc(const std::vector<std::string>& args) {
  RpcArgs a;
  if (Smoke()) {
    a.bytes = 16ull << 20;
    a.model_elems = 1ull << 20;
  }
  if (!ParseArgs(args, &a)) return 2;
  TcpFigures tcp;
  TcpPair pair;
  if (!pair.Start(a)) return 1;
  pair.Measure(&tcp);

  const std::string dir =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("zs_rpc_bench_", getpid())).string();
  std::filesystem::create_directories(dir);
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  RpcTarget plain, tls;
  absl::Status started = plain.Start(a, dir + "/plain", "");
  if (started.ok() && a.tls) {
    started = testing::MakeDevCredentials(dir + "/creds");
    if (started.ok()) started = tls.Start(a, dir + "/tls", dir + "/creds");
  }
  if (!started.ok()) {
    std::fprintf(stderr, "rpc: %s\n", started.ToString().c_str());
    return 1;
  }
  // Warm-up: the first GiB on a new connection runs while windows grow.
  plain.Gather(a.bytes);
  plain.Push(a.bytes / 2, true);
  if (a.tls) {
    tls.Gather(a.bytes);
    tls.Push(a.bytes / 2, true);
  }
  // Plaintext and TLS alternate, best of two each (the machine is noisy).
  // A skipped step's push moves the same bytes and applies no update: the
  // push's transport.
  double g = 0, p_known = 0, g_tls = 0, p_tls = 0, p_skip = 0;
  for (int rep = 0; rep < 2; ++rep) {
    g = std::max(g, plain.Gather(a.bytes));
    if (a.tls) g_tls = std::max(g_tls, tls.Gather(a.bytes));
    p_known = std::max(p_known, plain.Push(a.bytes, true));
    if (a.tls) p_tls = std::max(p_tls, tls.Push(a.bytes, true));
    p_skip = std::max(p_skip, plain.Push(a.bytes, true, true));
  }
  const double p_commit = plain.Push(a.bytes, false);
  const uint64_t T = plain.elems();
  plain.Stop();
  tls.Stop();
  pair.Measure(&tcp);
  // The update the push carries, alone, once the server is gone (the same
  // cores, the same element count).
  const double update_alone = UpdateAloneGparamsPerSecond(T, Smoke() ? 1 : 3);
  if (tcp.recv_gbps <= 0 || tcp.send_gbps <= 0) return 1;
  std::filesystem::remove_all(dir);
  if (g < 0 || p_known < 0 || p_commit < 0) return 1;
  if (a.tls && (g_tls <= 0 || p_tls <= 0)) return 1;

  std::printf("rpc: loopback, %s per run, %s messages, %s model (FP32), "
              "glibc malloc tuned on both sides\n",
              absl::StrCat(a.bytes >> 20, " MiB").c_str(),
              absl::StrCat(a.message_bytes >> 10, " KiB").c_str(),
              absl::StrCat(T >> 20, "M-element").c_str());
  std::printf("  raw TCP peer->us (recv)        %6.2f GB/s\n", tcp.recv_gbps);
  std::printf("  raw TCP us->peer (send)        %6.2f GB/s\n", tcp.send_gbps);
  std::printf("  Gather fp32                    %6.2f GB/s  ratio %.2f vs TCP recv\n",
              g, g / tcp.recv_gbps);
  std::printf("  PushGrad fp32, coef up front   %6.2f GB/s  ratio %.2f vs TCP send\n",
              p_known, p_known / tcp.send_gbps);
  std::printf("  PushGrad fp32, commit last     %6.2f GB/s  ratio %.2f vs TCP send\n",
              p_commit, p_commit / tcp.send_gbps);
  std::printf("  PushGrad fp32, skipped step    %6.2f GB/s  ratio %.2f vs TCP "
              "send (the push's transport: no update)\n",
              p_skip, p_skip / tcp.send_gbps);
  // The time the update adds to the transport, per element, as a rate;
  // against the same update alone (at its memory bound: zeroshard-bench
  // adam). The update overlaps the transport in part, so this is the part
  // it does not hide.
  const double added_s_per_gb = 1.0 / p_known - 1.0 / p_skip;
  const double update_in_push =
      added_s_per_gb > 0 ? (1e9 / 4.0) / added_s_per_gb / 1e9 : 0;
  std::printf("  the update inside the push     %6.2f G params/s (the time it "
              "adds to the transport) vs %.2f alone: ratio %.2f\n",
              update_in_push, update_alone,
              update_alone > 0 ? update_in_push / update_alone : 0);
  if (a.tls) {
    std::printf("  Gather fp32, mutual TLS        %6.2f GB/s  ratio %.2f vs "
                "plaintext (target 0.7)\n", g_tls, g_tls / g);
    std::printf("  PushGrad fp32, mutual TLS      %6.2f GB/s  ratio %.2f vs "
                "plaintext (target 0.7)\n", p_tls, p_tls / p_known);
    std::printf("rpc tls_gather_ratio=%.2f tls_push_ratio=%.2f\n",
                g_tls / g, p_tls / p_known);
  }
  const double gather_ratio = g / tcp.recv_gbps;
  const double transport_push_ratio = p_skip / tcp.send_gbps;
  std::printf("rpc gather_ratio=%.2f push_transport_ratio=%.2f "
              "push_with_update_ratio=%.2f push_commit_ratio=%.2f "
              "update_in_push_ratio=%.2f\n",
              gather_ratio, transport_push_ratio, p_known / tcp.send_gbps,
              p_commit / tcp.send_gbps,
              update_alone > 0 ? update_in_push / update_alone : 0);
  std::printf("(ratio = the transport: the lower of gather_ratio, Gather vs TCP "
              "recv, and push_transport_ratio, a skipped step's PushGrad vs TCP "
              "send; the push with its update, with the commit last, and the "
              "update's share are beside it; TLS ratios are TLS over "
              "plaintext, coefficient up front, same run)\n");
  std::printf("rpc ratio=%.2f target=0.85\n",
              std::min(gather_ratio, transport_push_ratio));
  return 0;
}

ZS_REGISTER_BENCH("rpc", "Gather/PushGrad GB/s vs raw TCP over loopback",
                  RunRpc);

}  // namespace
}  // namespace zeroshard::bench
