// The client-streaming SetWeights call (admin): the first WeightPiece
// carries the admin token; every piece is validated (FP32 or BF16, a whole
// number of elements, at most kMaxPiecePayloadBytes, inside the owned range)
// and then written to master and mirror at once. m, v, versions and the
// Adam step count are unchanged. An invalid piece ends the call; pieces
// before it stay written.
#ifndef ZEROSHARD_SERVER_SET_WEIGHTS_REACTOR_H_
#define ZEROSHARD_SERVER_SET_WEIGHTS_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/zeroshard/v1/shard.pb.h"
#include "server/rpc_counters.h"
#include "server/model_shard.h"

namespace zeroshard {

class SetWeightsReactor : public grpc::ServerReadReactor<v1::WeightPiece> {
 public:
  using AdminCheck = std::function<absl::Status(const std::string& token)>;
  SetWeightsReactor(AdminCheck check_admin,
                    absl::StatusOr<std::shared_ptr<ModelShard>> state,
                    v1::SetWeightsResponse* response, RpcCounters* counters);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  absl::Status Write(const v1::WeightPiece& piece);
  void End(const absl::Status& status);

  AdminCheck check_admin_;
  absl::StatusOr<std::shared_ptr<ModelShard>> state_;
  v1::SetWeightsResponse* const response_;
  RpcCounters* const counters_;
  v1::WeightPiece message_;
  bool first_ = true;
  uint64_t written_ = 0;
  absl::Status result_;
  bool recorded_ = false;  // result_ already counted
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SET_WEIGHTS_REACTOR_H_
