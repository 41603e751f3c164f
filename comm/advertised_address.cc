#include "comm/advertised_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {
namespace {

struct AddrInfoFree {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoFree>;

// getaddrinfo with retries of temporary failures until `timeout`.
absl::StatusOr<AddrInfoPtr> Lookup(const std::string& host,
                                   const char* port, int socktype,
                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = socktype;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port, &hints, &res);
    if (rc == 0 && res != nullptr) return AddrInfoPtr(res);
    if (absl::Now() + absl::Seconds(1) >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "cannot resolve host '", host, "': ", gai_strerror(rc), " (for ",
          absl::FormatDuration(timeout), ")"));
    }
    absl::SleepFor(absl::Seconds(1));
  }
}

std::string Numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST] = {0};
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) !=
      0) {
    return "";
  }
  return buf;
}

}  // namespace

absl::StatusOr<std::string> HostOfAddress(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close != absl::string_view::npos && close + 1 < address.size() &&
        address[close + 1] == ':') {
      return std::string(address.substr(1, close - 1));
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon != absl::string_view::npos && colon > 0) {
      return std::string(address.substr(0, colon));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("address '", address, "' is not HOST:PORT"));
}

absl::StatusOr<std::string> ResolveHost(const std::string& host,
                                        absl::Duration timeout) {
  auto ai = Lookup(host, nullptr, SOCK_STREAM, timeout);
  if (!ai.ok()) return ai.status();
  std::string n = Numeric((*ai)->ai_addr, (*ai)->ai_addrlen);
  if (n.empty()) {
    return absl::InternalError(absl::StrCat("cannot print the address of '",
                                            host, "'"));
  }
  return n;
}

bool IsLoopbackAddress(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& address,
                                               absl::Duration timeout) {
  auto host = HostOfAddress(address);
  if (!host.ok()) return host.status();
  // The port only shapes the connect(); a datagram socket sends nothing.
  auto ai = Lookup(*host, "9", SOCK_DGRAM, timeout);
  if (!ai.ok()) return ai.status();
  const int fd = socket((*ai)->ai_family, SOCK_DGRAM, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  std::string result;
  absl::Status status;
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (connect(fd, (*ai)->ai_addr, (*ai)->ai_addrlen) != 0) {
    status = absl::UnavailableError(absl::StrCat(
        "no route to ", address, " to pick this worker's address from: ",
        std::strerror(errno)));
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) !=
             0) {
    status = absl::InternalError(
        absl::StrCat("getsockname: ", std::strerror(errno)));
  } else {
    result = Numeric(reinterpret_cast<sockaddr*>(&local), len);
    if (result.empty()) status = absl::InternalError("getnameinfo failed");
  }
  close(fd);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<std::string> ChooseAdvertisedAddress(
    const std::string& hostname_flag, const std::string& server0,
    absl::Duration timeout) {
  if (hostname_flag.empty()) return LocalAddressToward(server0, timeout);
  auto host = HostOfAddress(server0);
  if (!host.ok()) return host.status();
  auto server_ip = ResolveHost(*host, timeout);
  if (!server_ip.ok()) return server_ip.status();
  auto mine = ResolveHost(hostname_flag, timeout);
  if (!mine.ok()) return mine.status();
  if (IsLoopbackAddress(*mine) && !IsLoopbackAddress(*server_ip)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--hostname=", hostname_flag, " is a loopback address (", *mine,
        ") but server 0 (", server0, ") is at ", *server_ip,
        ": workers on other hosts could not reach this one; leave --hostname "
        "empty to use the address this worker reaches server 0 from"));
  }
  return hostname_flag;
}

absl::Status CheckPeerAddresses(int rank,
                                const std::vector<std::string>& addresses) {
  if (rank < 0 || rank >= static_cast<int>(addresses.size()) ||
      !IsLoopbackAddress(addresses[rank])) {
    return absl::OkStatus();
  }
  for (int q = 0; q < static_cast<int>(addresses.size()); ++q) {
    if (q == rank || IsLoopbackAddress(addresses[q])) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " advertises the loopback address ", addresses[rank],
        " for its collectives, but rank ", q, " advertises ", addresses[q],
        " (another host), which cannot reach a loopback address: set "
        "--hostname to an address of this host that rank ", q,
        " can reach, or leave --hostname empty to use the address this "
        "worker reaches server 0 from"));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
