// gRPC settings for large streaming messages, shared by servers and clients.
//
// Measured on a 2-core x86-64 machine: 4 MiB streaming messages over loopback run at ~1.4 GB/s with only the message
// size limits raised, and ~3.4 GB/s with the BDP probe off and 64 MiB
// flow-control windows and write buffers.
#ifndef ZEROSHARD_WIRE_GRPC_TUNING_H_
#define ZEROSHARD_WIRE_GRPC_TUNING_H_

#include <grpcpp/grpcpp.h>

namespace zeroshard {

// Largest message a client accepts (Gather replies carry at most 1 MiB of
// payload; room for large Inspect replies).
inline constexpr int kMaxGrpcMessageBytes = 64 << 20;
// Largest message a server accepts: a 4 MiB piece (PushGrad, SetWeights)
// plus framing, with room for Init manifests. Anything larger is refused by
// gRPC (RESOURCE_EXHAUSTED) before it is buffered or parsed.
inline constexpr int kMaxServerReceiveBytes = 8 << 20;
// HTTP/2 stream lookahead, write buffer and frame size.
inline constexpr int kGrpcWindowBytes = 64 << 20;

// Channel arguments for a client channel to a shard server.
grpc::ChannelArguments TunedChannelArguments();

// Applies the same settings to a server builder.
void ApplyServerTuning(grpc::ServerBuilder& builder);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_GRPC_TUNING_H_
