// Authentication and authorization over real gRPC (server/authorizer.h):
// every method refused without credentials or with a wrong token
// (UNAUTHENTICATED) and for a role not allowed it (PERMISSION_DENIED),
// counted by method in Inspect, with nothing changed; tokens re-read when
// their file changes. The mutual-TLS half is in tls_test.cc.
#include <grpcpp/generic/generic_stub.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/authorizer.h"
#include "tests/server/auth_test_util.h"
#include "tests/server/server_test_util.h"
#include "tests/support/test_files.h"
#include "wire/credentials.h"
#include "wire/grpc_tuning.h"

namespace zeroshard::testing {
namespace {

// What each role may call (the contract of server/authorizer.h, written out
// here rather than taken from the code under test).
const std::map<std::string, std::set<std::string>>& Allowed() {
  static const auto* allowed = new std::map<std::string, std::set<std::string>>{
      {"worker",
       {"Gather", "PushGrad", "ApplyStep", "KvSet", "KvGet", "KvWait",
        "OpenRegion", "CloseRegion", "Inspect"}},
      {"ctl", {"Inspect"}},
      {"admin", std::set<std::string>(AllMethods().begin(), AllMethods().end())},
  };
  return *allowed;
}

class AuthorizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("zs_auth_");
    ASSERT_FALSE(dir_.empty());
    ASSERT_TRUE(WriteTokenCredentials(dir_, "a").ok());
    ShardServer::Options options;
    options.credentials_dir = dir_;
    auto server = ShardServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  std::unique_ptr<v1::ShardService::Stub> StubAs(const std::string& role) {
    auto security = ClientSecurity::Load(dir_, *ParseRole(role));
    EXPECT_TRUE(security.ok()) << security.status();
    return v1::ShardService::NewStub(
        CreateClientChannel(address_, TunedChannelArguments(), *security));
  }

  std::string dir_;
  std::unique_ptr<ShardServer> server_;
  std::string address_;
};

TEST_F(AuthorizationTest, EveryMethodByRoleAndRefusalsChangeNothing) {
  auto admin = StubAs("admin");
  // Callers without credentials, or with a token the server does not know.
  const std::string stranger_dir = MakeTempDir("zs_auth_stranger_");
  ASSERT_TRUE(WriteTokenCredentials(stranger_dir, "b").ok());
  auto stranger_security = ClientSecurity::Load(stranger_dir, Role::kAdmin);
  ASSERT_TRUE(stranger_security.ok());
  std::map<std::string, std::unique_ptr<v1::ShardService::Stub>> callers;
  callers["none"] = v1::ShardService::NewStub(grpc::CreateCustomChannel(
      address_, grpc::InsecureChannelCredentials(), TunedChannelArguments()));
  callers["wrong token"] = v1::ShardService::NewStub(CreateClientChannel(
      address_, TunedChannelArguments(), *stranger_security));
  callers["worker"] = StubAs("worker");
  callers["ctl"] = StubAs("ctl");

  std::map<std::string, uint64_t> unauthenticated, denied;
  for (auto& [who, stub] : callers) {
    const std::map<std::string, grpc::Status> results = CallEveryMethod(*stub);
    ASSERT_EQ(results.size(), AllMethods().size());
    for (const auto& [method, status] : results) {
      SCOPED_TRACE(absl::StrCat(who, " calling ", method, ": ",
                                status.error_message()));
      if (who == "none" || who == "wrong token") {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
        EXPECT_NE(status.error_message().find(method), std::string::npos);
        ++unauthenticated[method];
      } else if (Allowed().at(who).count(method)) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
        EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
      } else {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
        EXPECT_NE(status.error_message().find(who), std::string::npos);
        ++denied[method];
      }
    }
  }
  // Nobody but admin could initialise the server.
  v1::InspectResponse seen = InspectAs(*admin);
  EXPECT_FALSE(seen.initialized());
  // Refusals are counted by method, and only refusals.
  for (const std::string& method : AllMethods()) {
    SCOPED_TRACE(method);
    EXPECT_EQ(seen.counters().unauthenticated().count(method)
                  ? seen.counters().unauthenticated().at(method)
                  : 0,
              unauthenticated[method]);
    EXPECT_EQ(seen.counters().permission_denied().count(method)
                  ? seen.counters().permission_denied().at(method)
                  : 0,
              denied[method]);
  }
  EXPECT_EQ(unauthenticated["Init"], 2u);
  EXPECT_EQ(denied["Init"], 2u);  // worker and ctl

  // Admin initialises; a worker's SetWeights is refused and writes nothing.
  ASSERT_TRUE(InitServer(*admin, MakeInit(SmallManifest(1), 1, 0, 7, 4096))
                  .ok());
  const std::vector<float> before = GatherFp32(*admin, {0, 64});
  const grpc::Status set = SetWeightsAs(*callers["worker"], 0,
                                        std::vector<float>(64, 42.0f));
  EXPECT_EQ(set.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(GatherFp32(*admin, {0, 64}), before);
  // The same call as admin does write: the refusal was the role.
  ASSERT_TRUE(SetWeightsAs(*admin, 0, std::vector<float>(64, 42.0f)).ok());
  EXPECT_EQ(GatherFp32(*admin, {0, 64}), std::vector<float>(64, 42.0f));
}

TEST_F(AuthorizationTest, ATokenTableChangeIsPickedUpWithoutARestart) {
  auto admin = StubAs("admin");
  ASSERT_TRUE(InspectStatus(*admin).ok());
  // Rotate: every role gets a new token; the old admin stub keeps sending
  // the old one... until its own file changes too (it re-reads it).
  const std::string old_dir = MakeTempDir("zs_auth_old_");
  ASSERT_TRUE(CopyDir(dir_, old_dir));
  auto old_security = ClientSecurity::Load(old_dir, Role::kAdmin);
  ASSERT_TRUE(old_security.ok());
  auto old_admin = v1::ShardService::NewStub(
      CreateClientChannel(address_, TunedChannelArguments(), *old_security));
  ASSERT_TRUE(InspectStatus(*old_admin).ok());
  ASSERT_TRUE(WriteTokenCredentials(dir_, "rotated").ok());
  // The server checks its file at most once a second: within a bound, the
  // old token is refused and the new one (re-read by `admin`) accepted.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  grpc::Status old_status;
  while (absl::Now() < deadline) {
    old_status = InspectStatus(*old_admin);
    if (old_status.error_code() == grpc::StatusCode::UNAUTHENTICATED) break;
    absl::SleepFor(absl::Milliseconds(100));  // polling a condition
  }
  EXPECT_EQ(old_status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status new_status;
  while (absl::Now() < deadline) {
    new_status = InspectStatus(*admin);
    if (new_status.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(new_status.ok()) << new_status.error_message();
}

TEST(AuthorizerTest, TokenTableIsValidated) {
  EXPECT_TRUE(ParseTokenTable("# c\n\nadmin 0123456789abcdef\n").ok());
  EXPECT_FALSE(ParseTokenTable("admin short\n").ok());
  EXPECT_FALSE(ParseTokenTable("root 0123456789abcdef\n").ok());
  EXPECT_FALSE(ParseTokenTable("admin 0123456789abcdef extra\n").ok());
  auto two = ParseTokenTable("admin 0123456789abcdef\nadmin fedcba9876543210\n");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);  // rotation: both accepted for a while
}

TEST(AuthorizerTest, ServerStartRefusesUnusableCredentials) {
  ShardServer::Options options;
  options.credentials_dir = MakeTempDir("zs_auth_empty_");
  EXPECT_EQ(ShardServer::Start(options).status().code(),
            absl::StatusCode::kNotFound);
  {
    std::ofstream(options.credentials_dir + "/tokens") << "admin short\n";
  }
  EXPECT_EQ(ShardServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  {
    std::ofstream(options.credentials_dir + "/server.pem") << "x";
  }
  EXPECT_EQ(ShardServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // TLS files incomplete
}

TEST(AuthorizerTest, LoopbackIsResolvedNotStringMatched) {
  EXPECT_TRUE(ResolvesToLoopbackOnly("127.0.0.1"));
  EXPECT_TRUE(ResolvesToLoopbackOnly("127.1.2.3"));
  EXPECT_TRUE(ResolvesToLoopbackOnly("::1"));
  EXPECT_TRUE(ResolvesToLoopbackOnly("localhost"));
  EXPECT_FALSE(ResolvesToLoopbackOnly("0.0.0.0"));
  EXPECT_FALSE(ResolvesToLoopbackOnly("::"));
  EXPECT_FALSE(ResolvesToLoopbackOnly(""));
  EXPECT_FALSE(ResolvesToLoopbackOnly("10.1.2.3"));
}

}  // namespace
}  // namespace zeroshard::testing
