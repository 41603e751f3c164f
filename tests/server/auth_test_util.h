// Shared pieces of the authorization and TLS tests: credentials written to a
// directory, one call of every ShardService method (minimal requests; what
// matters is whether the call got past authorization), and small typed calls
// with bounded deadlines.
#ifndef ZEROSHARD_TESTS_SERVER_AUTH_TEST_UTIL_H_
#define ZEROSHARD_TESTS_SERVER_AUTH_TEST_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/zeroshard/v1/shard.grpc.pb.h"

namespace zeroshard::testing {

// The ShardService methods, in proto order.
const std::vector<std::string>& AllMethods();

// Writes a token table and one token file per role into `dir`; `tag` makes
// the tokens differ from another call's.
absl::Status WriteTokenCredentials(const std::string& dir,
                                   const std::string& tag);

// Copies the regular files of `from` into `to`.
bool CopyDir(const std::string& from, const std::string& to);

// Calls every method once (5 s deadlines); the status of each by name.
std::map<std::string, grpc::Status> CallEveryMethod(
    v1::ShardService::Stub& stub);

grpc::Status InspectStatus(v1::ShardService::Stub& stub);
v1::InspectResponse InspectAs(v1::ShardService::Stub& stub);
// One SetWeights stream with one FP32 piece at `offset`.
grpc::Status SetWeightsAs(v1::ShardService::Stub& stub, uint64_t offset,
                          const std::vector<float>& values);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SERVER_AUTH_TEST_UTIL_H_
