// The address a worker advertises to its peers for Gloo's TCP connections,
// and the check that peers can reach it (docs/DESIGN.md, "Rendezvous").
//
// A worker on another host cannot connect to 127.0.0.1. By default a worker
// advertises the local address of its route to server 0 (a UDP socket
// connect()ed to server 0, then getsockname(): no packet is sent), which is
// loopback exactly when the servers are. Every rank publishes its resolved
// address in the rendezvous store before Gloo's own keys; a rank that
// advertises loopback while a peer advertises a non-loopback address (so the
// peer is on another host) fails at once with CheckPeerAddresses's error.
//
//   ASSIGN_OR_RETURN(std::string me, LocalAddressToward("10.0.0.5:7070",
//                                                        absl::Seconds(30)));
//   RETURN_IF_ERROR(CheckPeerAddresses(rank, published_addresses));
#ifndef ZEROSHARD_WORKER_COMM_ADVERTISED_ADDRESS_H_
#define ZEROSHARD_WORKER_COMM_ADVERTISED_ADDRESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace zeroshard {

// The host of "HOST:PORT" or "[V6]:PORT"; INVALID_ARGUMENT without a port.
absl::StatusOr<std::string> HostOfAddress(absl::string_view address);

// The numeric form of the first address `host` (a name or an IP) resolves
// to. Name resolution failures are retried until `timeout` (a Kubernetes
// headless service names a pod only once it is ready); then UNAVAILABLE.
absl::StatusOr<std::string> ResolveHost(const std::string& host,
                                        absl::Duration timeout);

// True for numeric IPv4 127.0.0.0/8, IPv6 ::1 and IPv4-mapped 127.x, and
// the name "localhost".
bool IsLoopbackAddress(absl::string_view host);

// The local address of this machine's route to `address` (HOST:PORT), as a
// numeric IP. Bounded by `timeout` (name resolution).
absl::StatusOr<std::string> LocalAddressToward(const std::string& address,
                                               absl::Duration timeout);

// The address for GroupOptions::hostname given the --hostname flag and
// server 0's HOST:PORT: the flag when set, else LocalAddressToward(server 0).
// FAILED_PRECONDITION when the flag is a loopback address while server 0 is
// not (peers on other hosts could never reach this worker).
absl::StatusOr<std::string> ChooseAdvertisedAddress(
    const std::string& hostname_flag, const std::string& server0,
    absl::Duration timeout);

// `addresses[q]` is the address rank q advertises (numeric). OK unless
// addresses[rank] is loopback and some peer's is not: then
// FAILED_PRECONDITION naming both addresses and --hostname.
absl::Status CheckPeerAddresses(int rank,
                                const std::vector<std::string>& addresses);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_COMM_ADVERTISED_ADDRESS_H_
