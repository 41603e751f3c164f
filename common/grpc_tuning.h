// gRPC settings for large streaming messages, shared by servers and clients.
//
// Measured on this kind of machine (../shared/MACHINE-NOTES.md): 4 MiB
// streaming messages over loopback run at ~1.4 GB/s with only the message
// size limits raised, and ~3.4 GB/s with the BDP probe off and 64 MiB
// flow-control windows and write buffers.
#ifndef ZEROSHARD_COMMON_GRPC_TUNING_H_
#define ZEROSHARD_COMMON_GRPC_TUNING_H_

#include <grpcpp/grpcpp.h>

namespace zeroshard {

// Largest message either side accepts (payload limit 1 MiB + framing, with
// room for Init manifests).
inline constexpr int kMaxGrpcMessageBytes = 64 << 20;
// HTTP/2 stream lookahead, write buffer and frame size.
inline constexpr int kGrpcWindowBytes = 64 << 20;

// Channel arguments for a client channel to a shard server.
grpc::ChannelArguments TunedChannelArguments();

// Applies the same settings to a server builder.
void ApplyServerTuning(grpc::ServerBuilder& builder);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_GRPC_TUNING_H_
