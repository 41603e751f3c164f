// The edge between the handlers' absl::Status and gRPC's: every reactor
// finishes its call with an absl::Status, converted here (ToGrpcStatus:
// the code and the message kept) and nowhere else in the server.
//
//   class GatherReactor
//       : public StatusReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
//     ...
//     FinishWith(absl::NotFoundError("..."));
//   };
//
// Unary replies convert the same way, in UnaryReply::Finish
// (server/raw_messages.h).
#ifndef ZEROSHARD_SERVER_STATUS_REACTOR_H_
#define ZEROSHARD_SERVER_STATUS_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "wire/grpc_status.h"

namespace zeroshard {

// `Reactor`: one of gRPC's server reactors (grpc::ServerReadReactor<T>,
// grpc::ServerWriteReactor<T>, grpc::ServerUnaryReactor).
template <class Reactor>
class StatusReactor : public Reactor {
 protected:
  // Finishes the call with `status` (OK included).
  void FinishWith(const absl::Status& status) {
    this->Finish(ToGrpcStatus(status));
  }
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STATUS_REACTOR_H_
