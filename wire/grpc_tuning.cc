#include "wire/grpc_tuning.h"

namespace zeroshard {

grpc::ChannelArguments TunedChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kGrpcWindowBytes);
  args.SetInt(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, kGrpcWindowBytes);
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 16 << 20);
  // Each ShardClient channel is its own TCP connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

void ApplyServerTuning(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kMaxServerReceiveBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
                             kGrpcWindowBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, kGrpcWindowBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 16 << 20);
}

}  // namespace zeroshard
