#include "wire/grpc_status.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

absl::Status FromGrpcStatus(const grpc::Status& status,
                            const std::string& what,
                            const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, " to ", address, ": ",
                                   status.error_message()));
}

}  // namespace zeroshard
