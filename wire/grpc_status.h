// The one conversion between absl::Status and grpc::Status, used at the RPC
// edge by the server's handlers and the client's calls. The canonical codes
// have the same numeric values in both.
#ifndef ZEROSHARD_WIRE_GRPC_STATUS_H_
#define ZEROSHARD_WIRE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace zeroshard {

grpc::Status ToGrpcStatus(const absl::Status& s);

absl::Status FromGrpcStatus(const grpc::Status& s);

// The same code, the message prefixed by "<what> to <address>: " (a client's
// view of a failed call to one server).
absl::Status FromGrpcStatus(const grpc::Status& status,
                            const std::string& what,
                            const std::string& address);

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_GRPC_STATUS_H_
