// Mutual TLS over real gRPC, with certificates made by
// scripts/make-dev-credentials.sh (openssl): the role comes from the client
// certificate's CN; a client without a certificate, with one from another CA,
// or trusting another CA gets no connection; only TLS 1.3 is served (a
// client limited to TLS 1.2 fails its handshake); and rotated certificate
// files are used without a restart.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/server/auth_test_util.h"
#include "tests/server/server_test_util.h"
#include "tests/support/test_files.h"
#include "wire/credentials.h"
#include "wire/grpc_tuning.h"

namespace zeroshard::testing {
namespace {

constexpr char kScript[] = "scripts/make-dev-credentials.sh";

bool MakeCredentials(const std::string& dir) {
  const std::string cmd =
      absl::StrCat("bash ", kScript, " '", dir, "' DNS:zeroshard-test >/dev/null");
  return std::system(cmd.c_str()) == 0;
}

// A client directory holding only some files of `from`.
std::string ClientDir(const std::string& from,
                      const std::vector<std::string>& files) {
  const std::string dir = MakeTempDir("zs_tls_client_");
  for (const std::string& f : files) {
    std::filesystem::copy_file(from + "/" + f, dir + "/" + f);
  }
  return dir;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kScript)) {
      GTEST_SKIP() << kScript << " is not in the working directory (Bazel "
                   << "sandbox); CTest runs this test from the source tree";
    }
    dir_ = MakeTempDir("zs_tls_");
    ASSERT_TRUE(MakeCredentials(dir_)) << "openssl missing?";
    // Certificates only: roles come from them, not from tokens.
    std::filesystem::remove(dir_ + "/tokens");
    ShardServer::Options options;
    options.credentials_dir = dir_;
    options.certificate_refresh = absl::Seconds(1);
    auto server = ShardServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_TRUE(server_->tls());
  }

  std::unique_ptr<v1::ShardService::Stub> StubFrom(const std::string& dir,
                                                   Role role) {
    auto security = ClientSecurity::Load(dir, role, absl::Seconds(1));
    EXPECT_TRUE(security.ok()) << security.status();
    if (!security.ok()) return nullptr;
    grpc::ChannelArguments args = TunedChannelArguments();
    // A fresh connection per channel (rotation checks need new handshakes).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::ShardService::NewStub(CreateClientChannel(
        absl::StrCat("localhost:", server_->port()), args, *security));
  }

  std::string dir_;
  std::unique_ptr<ShardServer> server_;
};

TEST_F(TlsTest, RolesComeFromClientCertificates) {
  const std::string ctl_dir = ClientDir(dir_, {"ca.pem", "ctl.pem", "ctl.key"});
  const std::string admin_dir =
      ClientDir(dir_, {"ca.pem", "admin.pem", "admin.key"});
  const std::string worker_dir =
      ClientDir(dir_, {"ca.pem", "worker.pem", "worker.key"});
  auto ctl = StubFrom(ctl_dir, Role::kCtl);
  auto admin = StubFrom(admin_dir, Role::kAdmin);
  auto worker = StubFrom(worker_dir, Role::kWorker);
  ASSERT_TRUE(ctl && admin && worker);
  EXPECT_TRUE(InspectStatus(*ctl).ok());
  const std::map<std::string, grpc::Status> as_ctl = CallEveryMethod(*ctl);
  EXPECT_EQ(as_ctl.at("Init").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(InspectAs(*admin).initialized());
  ASSERT_TRUE(InitServer(*admin, MakeInit(SmallManifest(1), 1, 0, 3, 4096))
                  .ok());
  EXPECT_TRUE(InspectAs(*admin).initialized());
  EXPECT_EQ(SetWeightsAs(*worker, 0, std::vector<float>(64, 1.0f))
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(GatherFp32(*worker, {0, 64}).size(), 64u);  // a worker may read
  const v1::InspectResponse seen = InspectAs(*admin);
  // ctl's call of every method, and the worker's above.
  EXPECT_EQ(seen.counters().permission_denied().at("SetWeights"), 2u);
}

TEST_F(TlsTest, NoCertificateOrAnotherCaGetsNoConnection) {
  // Trusts the server's CA but has no certificate of its own.
  const std::string bare = ClientDir(dir_, {"ca.pem"});
  auto no_cert = StubFrom(bare, Role::kAdmin);
  ASSERT_NE(no_cert, nullptr);
  EXPECT_EQ(InspectStatus(*no_cert).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A whole other CA: its admin certificate is not trusted by the server,
  // and the server's certificate is not trusted by the client.
  const std::string other = MakeTempDir("zs_tls_other_");
  ASSERT_TRUE(MakeCredentials(other));
  auto stranger = StubFrom(ClientDir(other, {"ca.pem", "admin.pem", "admin.key"}),
                           Role::kAdmin);
  EXPECT_EQ(InspectStatus(*stranger).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Our CA but the other CA's client certificate: refused by the server.
  const std::string mixed = MakeTempDir("zs_tls_mixed_");
  std::filesystem::copy_file(dir_ + "/ca.pem", mixed + "/ca.pem");
  std::filesystem::copy_file(other + "/admin.pem", mixed + "/admin.pem");
  std::filesystem::copy_file(other + "/admin.key", mixed + "/admin.key");
  auto forged = StubFrom(mixed, Role::kAdmin);
  EXPECT_EQ(InspectStatus(*forged).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Nothing got through.
  auto admin =
      StubFrom(ClientDir(dir_, {"ca.pem", "admin.pem", "admin.key"}), Role::kAdmin);
  EXPECT_FALSE(InspectAs(*admin).initialized());
}

// What `openssl s_client` limited to `version` (-tls1_2, -tls1_3) prints
// when it connects to the server with a valid client certificate.
std::string Handshake(int port, const std::string& dir,
                      const std::string& version) {
  const std::string out = MakeTempDir("zs_tls_s_client_") + "/out";
  const std::string cmd = absl::StrCat(
      "echo | timeout 20 openssl s_client -connect 127.0.0.1:", port, " ",
      version, " -alpn h2 -CAfile '", dir, "/ca.pem' -cert '", dir,
      "/ctl.pem' -key '", dir, "/ctl.key' >'", out, "' 2>&1");
  (void)std::system(cmd.c_str());
  return ReadFile(out);
}

// TLS 1.3 only: a client limited to TLS 1.2, with a valid certificate, gets
// no session; one that speaks 1.3 negotiates it.
TEST_F(TlsTest, OnlyTls13IsServed) {
  const std::string v13 = Handshake(server_->port(), dir_, "-tls1_3");
  EXPECT_NE(v13.find("New, TLSv1.3, Cipher is TLS_"), std::string::npos)
      << v13;
  EXPECT_NE(v13.find("Verify return code: 0 (ok)"), std::string::npos) << v13;
  const std::string any = Handshake(server_->port(), dir_, "");
  EXPECT_NE(any.find("New, TLSv1.3"), std::string::npos) << any;
  const std::string v12 = Handshake(server_->port(), dir_, "-tls1_2");
  EXPECT_NE(v12.find("Cipher is (NONE)"), std::string::npos) << v12;
  EXPECT_EQ(v12.find("New, TLSv1.2, Cipher is ECDHE"), std::string::npos)
      << v12;
}

TEST_F(TlsTest, RotatedCertificatesAreUsedWithoutARestart) {
  const std::string before = ClientDir(dir_, {"ca.pem", "admin.pem", "admin.key"});
  auto old_admin = StubFrom(before, Role::kAdmin);
  ASSERT_TRUE(InspectStatus(*old_admin).ok());
  // A new CA and new certificates in the server's directory.
  ASSERT_TRUE(MakeCredentials(dir_));
  std::filesystem::remove(dir_ + "/tokens");
  const std::string after = ClientDir(dir_, {"ca.pem", "admin.pem", "admin.key"});
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  grpc::Status fresh, stale;
  while (absl::Now() < deadline) {
    // New channels each round: every try is a new handshake.
    fresh = InspectStatus(*StubFrom(after, Role::kAdmin));
    stale = InspectStatus(*StubFrom(before, Role::kAdmin));
    if (fresh.ok() && !stale.ok()) break;
    absl::SleepFor(absl::Milliseconds(200));  // polling a condition
  }
  EXPECT_TRUE(fresh.ok()) << fresh.error_message();
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::UNAVAILABLE);
}


// One ClientSecurity (as zeroshard-train and every client keep) for many
// short-lived channels, each dropped just before the next is made, on two
// threads: every channel connects. With every channel watching the
// provider's certificates under one name, a new channel whose watch began
// while an old one's was being cancelled could never get them ("Failed to
// create security handshaker"; wire/credentials.h). That interleaving is
// too narrow to force from here: this run of 200 channels passed with the
// shared name too, so it guards the churn itself, not that one race.
TEST_F(TlsTest, ChannelsMadeWhileOthersAreDroppedAllConnect) {
  const std::string admin = ClientDir(dir_, {"ca.pem", "admin.pem", "admin.key"});
  auto security = ClientSecurity::Load(admin, Role::kAdmin, absl::Seconds(1));
  ASSERT_TRUE(security.ok()) << security.status();
  constexpr int kPerThread = 100;
  std::atomic<int> failed{0};
  std::string first_error;
  absl::Mutex mu;
  auto churn = [&] {
    for (int i = 0; i < kPerThread; ++i) {
      grpc::ChannelArguments args = TunedChannelArguments();
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      auto stub = v1::ShardService::NewStub(CreateClientChannel(
          absl::StrCat("localhost:", server_->port()), args, *security));
      const grpc::Status s = InspectStatus(*stub);
      if (!s.ok()) {
        failed.fetch_add(1);
        absl::MutexLock l(&mu);
        if (first_error.empty()) first_error = s.error_message();
      }
    }
  };
  std::thread other(churn);
  churn();
  other.join();
  EXPECT_EQ(failed.load(), 0) << "of " << 2 * kPerThread
                              << " channels; the first: " << first_error;
}

}  // namespace
}  // namespace zeroshard::testing
