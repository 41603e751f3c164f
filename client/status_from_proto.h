// Reads the servers' wire replies into client/server_status.h's types.
// Internal to client/: the one place outside wire/ that maps these messages.
#ifndef ZEROSHARD_CLIENT_STATUS_FROM_PROTO_H_
#define ZEROSHARD_CLIENT_STATUS_FROM_PROTO_H_

#include "absl/status/statusor.h"
#include "client/server_status.h"
#include "proto/zeroshard/v1/shard.pb.h"

namespace zeroshard {

// INVALID_ARGUMENT (naming the field) for an optimizer configuration with an
// unknown enum value.
absl::StatusOr<ServerStatus> StatusFromProto(const v1::InspectResponse& r);
ServerInit InitFromProto(const v1::InitResponse& r);
ShardFile ShardFileFromProto(const v1::CheckpointResponse& r);
ServerRestore RestoreFromProto(const v1::RestoreResponse& r);

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_STATUS_FROM_PROTO_H_
