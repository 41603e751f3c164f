// absl::Status <-> grpc::Status at the RPC edge. The canonical codes have the
// same numeric values in both.
#ifndef ZEROSHARD_SERVER_GRPC_STATUS_H_
#define ZEROSHARD_SERVER_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace zeroshard {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_GRPC_STATUS_H_
