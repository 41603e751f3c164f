// A protobuf message to and from the grpc::ByteBuffer that gRPC's raw and
// generic APIs carry, for the messages that take protobuf's own encoding
// (the bulk payloads go through wire/gather_codec.h and
// wire/push_grad_codec.h instead).
//
//   grpc::ByteBuffer b = ProtoToByteBuffer(request);
//   if (!ParseProtoFromByteBuffer(b, &reply)) ... does not parse
#ifndef ZEROSHARD_WIRE_PROTO_BUFFER_H_
#define ZEROSHARD_WIRE_PROTO_BUFFER_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include "google/protobuf/message_lite.h"

namespace zeroshard {

// The message serialized into one slice.
inline grpc::ByteBuffer ProtoToByteBuffer(
    const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// Parses `buffer` (read in place, not copied) into `message`; false when it
// does not parse.
inline bool ParseProtoFromByteBuffer(grpc::ByteBuffer& buffer,
                                     google::protobuf::MessageLite* message) {
  grpc::ProtoBufferReader reader(&buffer);
  return message->ParseFromZeroCopyStream(&reader);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_PROTO_BUFFER_H_
