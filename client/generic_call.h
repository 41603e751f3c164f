// A blocking streaming call on gRPC's public generic stub: messages are raw
// grpc::ByteBuffers (encoded and decoded by wire/), each operation runs on
// the call's own completion queue and returns when it has completed.
//
// Used for the two bulk RPCs, whose messages bypass protobuf: Gather
// (server streaming: one request, then replies until the end) and PushGrad
// (client streaming: pieces, then one reply). On the wire a generic call is
// the same HTTP/2 stream as a generated stub's call of either kind.
//
//   grpc::ClientContext ctx;
//   GenericStreamCall call(channel, "/zeroshard.v1.ShardService/Gather", &ctx);
//   call.WriteLast(request);
//   grpc::ByteBuffer reply;
//   while (call.Read(&reply)) { ... }
//   grpc::Status status = call.Finish();
//
// Contracts: one thread drives a call; ctx.TryCancel() may come from any
// thread and makes the pending operation fail. Write, WriteLast, WritesDone
// and Read return false once the stream is broken or (for Read) at its end;
// Finish then gives the status. Read every reply before Finish, also after a
// failed write: a server may reply and end the call before it has read all
// the client sent, and gRPC holds the status back until the reply is read.
// The destructor cancels and finishes a call that was not finished, so
// returning early leaks nothing. Initial metadata must not be corked.
#ifndef ZEROSHARD_CLIENT_GENERIC_CALL_H_
#define ZEROSHARD_CLIENT_GENERIC_CALL_H_

#include <memory>
#include <string>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

namespace zeroshard {

class GenericStreamCall {
 public:
  // Starts the call on `channel` (which must outlive it) with `context`
  // (likewise). A call that cannot start fails its first operation.
  GenericStreamCall(const std::shared_ptr<grpc::Channel>& channel,
                    const std::string& method, grpc::ClientContext* context);
  ~GenericStreamCall();
  GenericStreamCall(const GenericStreamCall&) = delete;
  GenericStreamCall& operator=(const GenericStreamCall&) = delete;

  bool Write(const grpc::ByteBuffer& message);
  // The last message and the half-close in one operation.
  bool WriteLast(const grpc::ByteBuffer& message);
  bool WritesDone();
  bool Read(grpc::ByteBuffer* message);
  // The call's final status; call once, after the last operation.
  grpc::Status Finish();

 private:
  // Waits for the one operation in flight; its success.
  bool Await();

  grpc::ClientContext* context_;
  grpc::CompletionQueue cq_;
  grpc::GenericStub stub_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_CLIENT_GENERIC_CALL_H_
