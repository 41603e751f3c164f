// RendezvousStore over the KvSet / KvGet / KvWait RPCs of one shard server
// (server 0 of the cluster by convention), for Gloo / NCCL bootstrap.
// Every call names the client's run and attempt (KvScope); the server drops
// an older attempt's keys when a newer one calls, and answers an older
// attempt's calls ABORTED (proto/zeroshard/v1/shard.proto, KvSetRequest).
//
//   ASSIGN_OR_RETURN(auto kv, KvClient::Connect("127.0.0.1:5000",
//                                                {"train-42", attempt}));
//   RETURN_IF_ERROR(kv->Set("gloo/0", my_address));
//   ASSIGN_OR_RETURN(std::string peer, kv->Get("gloo/1", absl::Seconds(30)));
//
// Every call is bounded: Set by the control timeout, Get and Wait by their
// timeout argument. UNAVAILABLE (e.g. the server is still starting) is
// retried until the timeout runs out. Thread-safe.
#ifndef ZEROSHARD_CLIENT_KV_CLIENT_H_
#define ZEROSHARD_CLIENT_KV_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rendezvous.h"

namespace zeroshard {

class ClientSecurity;  // wire/credentials.h

class KvClient : public RendezvousStore {
 public:
  // The run and attempt every call names.
  struct Scope {
    std::string run_id;
    uint64_t attempt = 0;
  };
  // `control_timeout` bounds Set. Credentials null: insecure.
  static absl::StatusOr<std::unique_ptr<KvClient>> Connect(
      const std::string& address, Scope scope,
      absl::Duration control_timeout = absl::Seconds(30),
      std::shared_ptr<const ClientSecurity> security = nullptr);

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

  // One KvGet without waiting: NOT_FOUND when the key is not set.
  absl::StatusOr<std::string> TryGet(const std::string& key);

  const Scope& scope() const { return scope_; }
  // A client of the same server and run naming another attempt; it shares
  // this client's channel. (Naming a newer attempt than the server's drops
  // the older attempt's keys: see the file comment.)
  std::unique_ptr<KvClient> WithAttempt(uint64_t attempt) const;

 private:
  struct Stub;  // the generated stub (shared with WithAttempt's clients)

  KvClient(std::string address, Scope scope, absl::Duration control_timeout,
           std::shared_ptr<const Stub> stub);

  const std::string address_;
  const Scope scope_;
  const absl::Duration control_timeout_;
  const std::shared_ptr<const Stub> stub_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_KV_CLIENT_H_
