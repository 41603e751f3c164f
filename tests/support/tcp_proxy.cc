#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zeroshard::testing {
namespace {

constexpr int kPollMillis = 50;

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(
    const std::string& upstream) {
  const size_t colon = upstream.rfind(':');
  std::unique_ptr<TcpProxy> p(new TcpProxy());
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(upstream.substr(colon + 1), &p->upstream_port_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("upstream \"", upstream, "\" is not HOST:PORT"));
  }
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return absl::InternalError("socket() failed");
  sockaddr_in a = Loopback(0);
  socklen_t len = sizeof(a);
  if (bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(p->listen_fd_, 64) != 0 ||
      getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return absl::InternalError(
        absl::StrCat("proxy listen failed: ", std::strerror(errno)));
  }
  p->port_ = ntohs(a.sin_port);
  p->acceptor_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> relays;
  {
    absl::MutexLock lock(&mu_);
    relays.swap(relays_);
  }
  for (auto& t : relays) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string TcpProxy::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void TcpProxy::Drop() { ++generation_; }
void TcpProxy::Stall() { stalled_ = true; }
void TcpProxy::Resume() { stalled_ = false; }

void TcpProxy::AcceptLoop() {
  while (!stop_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, kPollMillis) <= 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(upstream_port_);
    if (server < 0 ||
        connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(client);
      if (server >= 0) close(server);
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ++accepted_;
    absl::MutexLock lock(&mu_);
    relays_.emplace_back(
        [this, client, server, g = generation_.load()] {
          Relay(client, server, g);
        });
  }
}

void TcpProxy::Relay(int client, int server, uint64_t generation) {
  char buf[1 << 16];
  while (!stop_ && generation_.load() == generation) {
    if (stalled_) {
      usleep(kPollMillis * 1000);
      continue;
    }
    pollfd pfd[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    if (poll(pfd, 2, kPollMillis) <= 0) continue;
    bool closed = false;
    for (int i = 0; i < 2 && !closed; ++i) {
      if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(pfd[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        closed = true;
        break;
      }
      const int to = i == 0 ? server : client;
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
        if (w <= 0) {
          closed = true;
          break;
        }
        off += w;
      }
    }
    if (closed) break;
  }
  // A reset, not an orderly close, when dropped: as a cut cable looks to
  // a peer that is still writing.
  linger l{1, 0};
  setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  setsockopt(server, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(client);
  close(server);
}

}  // namespace zeroshard::testing
