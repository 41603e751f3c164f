// The one absl <-> gRPC status conversion: every canonical code survives the
// round trip, and the client's form names the call and the server.
#include "wire/grpc_status.h"

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

TEST(GrpcStatusTest, EveryCodeRoundTrips) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status s(static_cast<absl::StatusCode>(code),
                         code == 0 ? "" : "message");
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    const absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), s.code());
    EXPECT_EQ(back.message(), s.message());
  }
}

TEST(GrpcStatusTest, ClientFormKeepsCodeAndNamesTheServer) {
  absl::Status s = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::ABORTED, "stale step"), "PushGrad",
      "10.0.0.1:7000");
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "PushGrad to 10.0.0.1:7000: stale step");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "x", "y").ok());
}

}  // namespace
}  // namespace zeroshard
