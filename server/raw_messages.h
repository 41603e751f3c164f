// Typed messages on the raw (ByteBuffer) callback methods that every
// ShardService method is declared as (server/shard_service_impl.h): the
// server parses each request itself, so that bytes that do not parse get
// INVALID_ARGUMENT naming the method (gRPC's own deserialisation would
// answer UNIMPLEMENTED with no message), and serialises each unary reply
// itself, once the handler has filled it.
//
//   v1::KvGetRequest request;
//   if (absl::Status s = ParseRequest("KvGet", *raw_request, &request);
//       !s.ok()) ... finish with s
//   UnaryReply<v1::KvGetResponse> reply(raw_response);
//   reply.message()->set_found(true);
//   reply.Finish(context->DefaultReactor(), absl::OkStatus());
//
// A reactor that finishes its call later (KvWaitReactor,
// CheckpointWaitReactor) takes the UnaryReply over and finishes through it,
// so what it fills by then is what goes out.
#ifndef ZEROSHARD_SERVER_RAW_MESSAGES_H_
#define ZEROSHARD_SERVER_RAW_MESSAGES_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "wire/grpc_status.h"
#include "wire/proto_buffer.h"

namespace zeroshard {

// Parses the request of a call of `method`; INVALID_ARGUMENT
// "<method>: request does not parse" when it does not.
inline absl::Status ParseRequest(absl::string_view method,
                                 const grpc::ByteBuffer& raw,
                                 google::protobuf::MessageLite* request) {
  grpc::ByteBuffer copy(raw);  // shares the slices
  if (!ParseProtoFromByteBuffer(copy, request)) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, ": request does not parse"));
  }
  return absl::OkStatus();
}

// The typed reply of one unary call and gRPC's ByteBuffer for it. Movable,
// so that a reactor can own it until it finishes the call.
template <class Response>
class UnaryReply {
 public:
  // `raw` is gRPC's reply buffer of the call; it outlives the call.
  explicit UnaryReply(grpc::ByteBuffer* raw) : raw_(raw) {}

  Response* message() { return &message_; }

  // Serialises the message into the call's buffer when `status` is OK (an
  // error carries no reply), then finishes the call on `reactor` with
  // `status` converted to gRPC's (the one place a unary call converts).
  void Finish(grpc::ServerUnaryReactor* reactor, const absl::Status& status) {
    if (status.ok()) *raw_ = ProtoToByteBuffer(message_);
    reactor->Finish(ToGrpcStatus(status));
  }

 private:
  grpc::ByteBuffer* raw_;
  Response message_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_RAW_MESSAGES_H_
