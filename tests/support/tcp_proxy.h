// A TCP proxy on 127.0.0.1 for fault tests: it listens on port 0 and
// relays every accepted connection to one upstream address, until told to
// drop or stall its connections.
//
//   ASSERT_OK_AND_ASSIGN(auto proxy, TcpProxy::Start("127.0.0.1:4100"));
//   ... clients use proxy->address() ...
//   proxy->Drop();    // closes every connection (clients see a reset)
//   proxy->Stall();   // stops relaying: bytes wait, nothing is closed
//   proxy->Resume();  // relays again (a stalled connection goes on)
//
// Every thread is joined by the destructor, which closes everything; all
// waits are bounded (poll with a timeout).
#ifndef ZEROSHARD_TESTS_SUPPORT_TCP_PROXY_H_
#define ZEROSHARD_TESTS_SUPPORT_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard::testing {

class TcpProxy {
 public:
  // `upstream` is "127.0.0.1:PORT".
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(
      const std::string& upstream);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  std::string address() const;
  // Closes every open connection; new ones are relayed as before.
  void Drop();
  // Stops relaying bytes in both directions (new connections are accepted
  // and stall too) until Resume.
  void Stall();
  void Resume();
  // Connections accepted so far.
  int accepted() const { return accepted_.load(); }

 private:
  TcpProxy() = default;
  void AcceptLoop();
  void Relay(int client, int server, uint64_t generation);

  int listen_fd_ = -1;
  int port_ = 0;
  int upstream_port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stalled_{false};
  // Drop() raises it; a relay of an older generation closes its sockets.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::thread> relays_;
};

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_TCP_PROXY_H_
