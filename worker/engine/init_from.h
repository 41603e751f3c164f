// Starting weights from a file (zeroshard-worker --init_from=FILE): after
// InitializeServers, rank 0 reads a Hugging Face GPT-2 safetensors file
// (model/hf_gpt2.h), checks it against the layout, and overwrites the
// servers' FP32 master weights over the whole flat space with SetWeights
// (client/set_weights.h) for the client's layout; padding is written as
// zero. Adam m and v stay
// zero and the versions stay 0. Then every rank meets at a barrier.
//
//   RETURN_IF_ERROR(InitializeServers(cfg, rank, client.get(), group.get()));
//   RETURN_IF_ERROR(InitWeightsFromFile(path, cfg, rank, client.get(),
//                                       group.get()));
//
// Only servers that have not trained are overwritten: when any server's
// chunks are past version 0 (a restarted worker group, or a run resumed
// from a checkpoint), the file is not read and the servers are left as they
// are, so a restart with the same flags resumes instead of starting over.
// Servers at version 0 are (re)written, which is idempotent.
//
// Errors (rank 0's; the other ranks then fail at the barrier, which rank 0
// never reaches): the file's (NOT_FOUND, DATA_LOSS, INVALID_ARGUMENT naming
// the tensor, common/safetensors.h), FAILED_PRECONDITION for a server that
// is not initialised, and the servers' errors with their address.
#ifndef ZEROSHARD_WORKER_ENGINE_INIT_FROM_H_
#define ZEROSHARD_WORKER_ENGINE_INIT_FROM_H_

#include <string>

#include "absl/status/status.h"
#include "client/shard_cluster.h"
#include "common/config.h"
#include "comm/collectives.h"

namespace zeroshard {

absl::Status InitWeightsFromFile(const std::string& path,
                                 const TrainingConfig& config, int rank,
                                 ShardCluster* client, WorkerGroup* group);

}  // namespace zeroshard

#endif  // ZEROSHARD_WORKER_ENGINE_INIT_FROM_H_
