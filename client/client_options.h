// How a client of a zeroshard cluster talks to it: deadlines, retries,
// message and in-flight sizes, the worker group's attempt, credentials and
// the run id. Part of the client library's public API (client/shard_cluster.h).
#ifndef ZEROSHARD_CLIENT_CLIENT_OPTIONS_H_
#define ZEROSHARD_CLIENT_CLIENT_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/retry_policy.h"

namespace zeroshard {

class ClientSecurity;  // wire/credentials.h

// How long one connection attempt (TCP connect, TLS handshake, the server's
// HTTP/2 SETTINGS) may take before gRPC gives up on it: gRPC's own default.
// Channels set it as GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, which gRPC 1.51
// reads as this timeout.
inline constexpr int kConnectAttemptMs = 20000;

// ShardClientOptions::silence_probe's default.
inline constexpr absl::Duration kDefaultSilenceProbe = absl::Seconds(3);

// With replicas 2, a thread of each client (ShardChannels) looks every
// kWatchEvery at the calls in flight; a server with one waiting longer than
// kLagBeforeProbe is asked whether it still answers (one health check
// within silence_probe), and one that does not, while another server does,
// is left and its calls cancelled (never one holding a slot's last live
// copy): a hung or partitioned server costs a step about kLagBeforeProbe +
// kWatchEvery + silence_probe, not a call's deadline. A server that answers
// (a Gather waiting for a version, a slow step) is only asked again a tick
// later.
inline constexpr absl::Duration kLagBeforeProbe = absl::Seconds(1);
inline constexpr absl::Duration kWatchEvery = absl::Milliseconds(250);

struct ShardClientOptions {
  // Deadline of each RPC attempt, counted from its start. A push stream that
  // stays open through backward must finish within it.
  absl::Duration call_timeout = absl::Seconds(120);
  // Deadline of the small calls (Inspect, Health, Kv*, Init).
  absl::Duration control_timeout = absl::Seconds(30);
  // UNAVAILABLE retries.
  RetryPolicy retry;
  // Payload bytes per PushGrad piece and per Gather reply, <= 1 MiB.
  size_t max_message_bytes = 1 << 20;
  // Cap on the bytes of caller data that one push stream has handed to gRPC
  // and gRPC has not yet released.
  size_t max_bytes_in_flight = 64 << 20;
  // The worker group's incarnation, sent in every PushGrad header
  // (proto: PushGradHeader.attempt); the launcher raises it on restarts.
  uint64_t attempt = 0;
  // Who this client is (wire/credentials.h): TLS and/or a bearer token.
  // Null: plaintext without credentials (servers started open: tests).
  std::shared_ptr<const ClientSecurity> security;
  // The run (InitRequest.run_id) named by Init, every push and ApplyStep.
  std::string run_id;
  // Copies of each slot the cluster keeps (zeroshard.replicas, 1 or 2;
  // docs/DESIGN.md, "Replicas"): with 2, slot k lives on server k and on
  // server k + 1 mod S; pushes, ApplyStep, SetWeights and Restore reach
  // both, reads the first that answers, and a server that stops answering
  // (UNAVAILABLE after the retries, or a call past its deadline followed by
  // a probe that goes unanswered: silence_probe) is left for the rest of
  // the client's life.
  int replicas = 1;
  // With replicas 2: how long a server whose call ran out its deadline has
  // to answer one health check before its copies are counted lost (a
  // partition, a hung process). A server that answers was only slow, or the call was a
  // wait that ended so (a Gather for a version not applied yet, a sliced
  // checkpoint wait), and the call's DEADLINE_EXCEEDED stands.
  absl::Duration silence_probe = kDefaultSilenceProbe;
};

// With replicas 2, how much longer than a call's own timeout a wait on the
// cluster's progress may take (a Gather for a version, a worker waiting for
// its peers): the step it waits for may first meet a silent server, which
// costs up to kLagBeforeProbe, a tick and the probe. Zero with one copy.
inline absl::Duration FailoverAllowance(const ShardClientOptions& o) {
  return o.replicas > 1 ? kLagBeforeProbe + kWatchEvery + o.silence_probe
                        : absl::ZeroDuration();
}

// The credentials of role `role_name` ("worker", "ctl" or "admin") from a
// credentials directory (wire/credentials.h); null for an empty `dir`.
absl::StatusOr<std::shared_ptr<const ClientSecurity>> LoadClientCredentials(
    const std::string& dir, const std::string& role_name);

// Splits "a:1,b:2" into addresses; INVALID_ARGUMENT for an empty list or an
// entry without a port.
absl::StatusOr<std::vector<std::string>> ParseServerList(
    const std::string& list);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_CLIENT_OPTIONS_H_
