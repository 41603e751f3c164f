// The real zeroshard-server executable: start-up line, --port_file, serving
// Init / Inspect / health, graceful exit on SIGTERM, and clear start-up
// errors. The binary is found at <build>/bin next to <build>/tests.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_test_util.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

std::string ServerBinary() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string self(buf, n);
  const std::string dir = self.substr(0, self.rfind('/'));
  return dir + "/../bin/zeroshard-server";
}

// A child with stdout and stderr piped back; killed if still running.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]);
      close(err[0]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
    if (err_ >= 0) close(err_);
  }

  // One line of stdout, or "" after `timeout`.
  std::string ReadLine(absl::Duration timeout) {
    const absl::Time limit = absl::Now() + timeout;
    std::string line;
    while (absl::Now() < limit) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char c;
      if (read(out_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line.push_back(c);
    }
    return "";
  }
  // Everything on stderr until it closes (bounded).
  std::string ReadStderr(absl::Duration timeout) {
    const absl::Time limit = absl::Now() + timeout;
    std::string text;
    while (absl::Now() < limit) {
      pollfd p{err_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[512];
      const ssize_t n = read(err_, buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, n);
    }
    return text;
  }
  // The exit status, or -1 when still running after `timeout`.
  int Wait(absl::Duration timeout) {
    const absl::Time limit = absl::Now() + timeout;
    while (absl::Now() < limit) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  bool reaped_ = false;
};

TEST(ServerBinaryTest, ServesAndExitsOnSigterm) {
  const std::string binary = ServerBinary();
  ASSERT_EQ(access(binary.c_str(), X_OK), 0) << binary;
  const std::string port_file =
      absl::StrCat(::testing::TempDir(), "/zs_port_", getpid());
  Child child({binary, "--listen=127.0.0.1:0", "--server_index=1",
               "--num_servers=2", "--placement=host", "--no_auth",
               "--port_file=" + port_file});
  ASSERT_GT(child.pid(), 0);
  const std::string line = child.ReadLine(absl::Seconds(30));
  ASSERT_TRUE(absl::StartsWith(line, "zeroshard-server listening on 127.0.0.1:"))
      << "'" << line << "'";
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(':') + 1), &port));
  ASSERT_GT(port, 0);
  std::ifstream in(port_file);
  int file_port = 0;
  in >> file_port;
  EXPECT_EQ(file_port, port);
  std::remove(port_file.c_str());

  auto stub = testing::Connect(port);
  v1::InitResponse init;
  ASSERT_TRUE(testing::InitServer(
                  *stub, testing::MakeInit(testing::SmallManifest(1), 2, 1, 9, 0),
                  &init)
                  .ok());
  const v1::InspectResponse info = testing::Inspect(*stub);
  EXPECT_TRUE(info.initialized());
  EXPECT_EQ(info.server_index(), 1u);
  EXPECT_EQ(info.chunk_elems(), 262144u);
  EXPECT_EQ(info.owned_end(), init.total_elems());

  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext hc;
  testing::SetDeadline(hc, 20000);
  grpc::health::v1::HealthCheckResponse hr;
  ASSERT_TRUE(
      health->Check(&hc, grpc::health::v1::HealthCheckRequest(), &hr).ok());
  EXPECT_EQ(hr.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  ASSERT_EQ(kill(child.pid(), SIGTERM), 0);
  EXPECT_EQ(child.Wait(absl::Seconds(30)), 0);
}

TEST(ServerBinaryTest, StartUpErrorsAreClear) {
  const std::string binary = ServerBinary();
  {
    // No credentials at all: refused, naming the way out.
    Child child({binary, "--listen=127.0.0.1:0"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("--credentials"), std::string::npos) << err;
  }
  {
    // --no_auth is for loopback addresses only (resolved, so "localhost"
    // passes and 0.0.0.0 does not).
    Child child({binary, "--listen=0.0.0.0:0", "--no_auth"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("loopback"), std::string::npos) << err;
  }
  {
    // Tokens without TLS on a non-loopback address need --plaintext.
    const std::string dir = testing::MakeTempDir("zs_bin_creds_");
    ASSERT_FALSE(dir.empty());
    {
      std::ofstream f(dir + "/tokens");
      f << "admin 0123456789abcdef0123\n";
    }
    Child child({binary, "--listen=0.0.0.0:0", "--credentials=" + dir});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("--plaintext"), std::string::npos) << err;
  }
  {
    Child child({binary, "--placement=nowhere", "--no_auth"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("--placement"), std::string::npos) << err;
  }
  {
    // A device that cannot exist (no machine has 1000 GPUs), so the refusal
    // is checked on GPU machines too.
    Child child(
        {binary, "--placement=device", "--cuda_device=999", "--no_auth"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("--cuda_device=999"), std::string::npos) << err;
  }
  {
    Child child({binary, "--placement=device", "--cuda_device=-1", "--no_auth"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("negative"), std::string::npos) << err;
  }
  {
    Child child({binary, "--server_index=2", "--num_servers=2", "--no_auth"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("--server_index"), std::string::npos) << err;
  }
  {
    Child child({binary, "--max_pending_grad_mib=99999999999999", "--no_auth"});
    const std::string err = child.ReadStderr(absl::Seconds(30));
    EXPECT_EQ(child.Wait(absl::Seconds(30)), 1);
    EXPECT_NE(err.find("--max_pending_grad_mib"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace zeroshard
