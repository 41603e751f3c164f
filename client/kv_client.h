// RendezvousStore over the KvSet / KvGet / KvWait RPCs of the shard servers
// that hold the cluster's key-value store ("holders"): server 0, and with
// zeroshard.replicas 2 servers 0 and 1 (KvHolders), for Gloo / NCCL
// bootstrap and the FP16 loss scaler's records. Every call names the
// client's run and attempt (KvScope); each server drops an older attempt's
// keys when a newer one calls, and answers an older attempt's calls ABORTED
// (proto/zeroshard/v1/shard.proto, KvSetRequest).
//
//   ASSIGN_OR_RETURN(auto kv, KvClient::Connect({"127.0.0.1:5000"},
//                                                {"train-42", attempt}));
//   RETURN_IF_ERROR(kv->Set("gloo/0", my_address));
//   ASSIGN_OR_RETURN(std::string peer, kv->Get("gloo/1", absl::Seconds(30)));
//
// With several holders, each call goes to every holder not left, at once
// (one thread each): Set writes every one, TryGet takes a value any of them
// has (a replacement's store starts empty), Wait and Get end at the first
// holder that has every key. Once one holder has answered, the others get
// kKvGrace; one that has answered before and not within it (gone:
// UNAVAILABLE; or silent) is left for the rest of this client's life and
// its siblings' (WithAttempt), and a warning names it, so a lost holder
// costs one call kKvGrace, once. (One that never has may be starting
// still: it is called again.) A holder the
// caller's failover already left (FollowFailover) is not called at all. No
// holder answering is the call's error, as with one; an answer that is an
// error (ABORTED, PERMISSION_DENIED) is the call's answer.
//
// Every call is bounded: Set and TryGet by the control timeout, Get and
// Wait by their timeout argument. UNAVAILABLE (e.g. the server is still
// starting) is retried until the timeout runs out. Thread-safe.
#ifndef ZEROSHARD_CLIENT_KV_CLIENT_H_
#define ZEROSHARD_CLIENT_KV_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rendezvous.h"

namespace grpc {
class ClientContext;
class Status;
}  // namespace grpc

namespace zeroshard {

class ClientSecurity;  // wire/credentials.h

// How long the holders not yet answering get once one has answered.
inline constexpr absl::Duration kKvGrace = absl::Seconds(1);

// The servers that hold the key-value store: `replicas` of `servers` (at
// least one, at most all) from `first` on, wrapping around.
std::vector<std::string> KvHolders(const std::vector<std::string>& servers,
                                   int replicas, size_t first = 0);

class KvClient : public RendezvousStore {
 public:
  // The run and attempt every call names.
  struct Scope {
    std::string run_id;
    uint64_t attempt = 0;
  };
  // `holders`: one address or more (INVALID_ARGUMENT naming a bad one).
  // `control_timeout` bounds Set and TryGet. Credentials null: insecure.
  static absl::StatusOr<std::unique_ptr<KvClient>> Connect(
      const std::vector<std::string>& holders, Scope scope,
      absl::Duration control_timeout = absl::Seconds(30),
      std::shared_ptr<const ClientSecurity> security = nullptr);
  // The same for a comma-separated list ("a:1" or "a:1,b:2").
  static absl::StatusOr<std::unique_ptr<KvClient>> Connect(
      const std::string& holders, Scope scope,
      absl::Duration control_timeout = absl::Seconds(30),
      std::shared_ptr<const ClientSecurity> security = nullptr);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

  // One KvGet without waiting: NOT_FOUND when no holder has the key.
  absl::StatusOr<std::string> TryGet(const std::string& key);

  const Scope& scope() const { return scope_; }
  size_t holders() const;
  // Whether holder i has been left (see the file comment).
  bool left(size_t i) const;
  // `is_down(i)` true says holder i is gone by the caller's own failover
  // (the cluster's ShardChannels::IsDown of that server), so calls skip it.
  // Shared with WithAttempt's clients; it must stay callable while any of
  // them calls. Set before the first call.
  void FollowFailover(std::function<bool(size_t)> is_down);
  // A client of the same holders and run naming another attempt; it shares
  // this client's channels and what it has left. (Naming a newer attempt
  // than a server's drops the older attempt's keys: see the file comment.)
  std::unique_ptr<KvClient> WithAttempt(uint64_t attempt) const;

 private:
  struct Holders;  // the channels, stubs and left flags (shared)

  KvClient(Scope scope, absl::Duration control_timeout,
           std::shared_ptr<Holders> holders);

  // Runs `call(i, ctx)` on every holder not left, each until `deadline`
  // (see the file comment). `first`: the call ends at the first OK answer
  // (Wait); else it awaits every holder's (Set, TryGet).
  struct Outcome;  // kv_client.cc
  using HolderCall = std::function<grpc::Status(size_t, grpc::ClientContext*)>;
  Outcome OnHolders(absl::Time deadline, const std::string& what, bool first,
                    const HolderCall& call) const;

  // The holders' addresses, for messages.
  std::string Addresses() const;

  const Scope scope_;
  const absl::Duration control_timeout_;
  const std::shared_ptr<Holders> holders_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_KV_CLIENT_H_
