// Subprocess: lines, exit statuses, signals, exec errors, environment,
// output files, port files. Children are /bin/sh one-liners.
#include "common/subprocess.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.stdout_mode = SubprocessOptions::Output::kPipe;
  return o;
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name + "." + std::to_string(getpid());
}

TEST(SubprocessTest, ReadsLinesAndExitCode) {
  SubprocessOptions o = Shell("echo one; printf 'two\\nthree'; exit 3");
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*(*p)->ReadLine(absl::Seconds(10)), "one");
  EXPECT_EQ(*(*p)->ReadLine(absl::Seconds(10)), "two");
  EXPECT_EQ(*(*p)->ReadLine(absl::Seconds(10)), "three");
  EXPECT_EQ((*p)->ReadLine(absl::Seconds(10)).status().code(),
            absl::StatusCode::kOutOfRange);
  auto st = (*p)->Wait(absl::Seconds(10));
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->exited);
  EXPECT_EQ(st->code, 3);
  EXPECT_FALSE(st->success());
  EXPECT_EQ(st->ToString(), "exited with code 3");
}

TEST(SubprocessTest, TimeoutsAndStop) {
  auto p = *Subprocess::Start(Shell("exec sleep 30"));
  EXPECT_EQ(p->ReadLine(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(p->Wait(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(p->Poll().has_value());
  ExitStatus st = p->Stop(absl::Seconds(10));
  EXPECT_FALSE(st.exited);
  EXPECT_EQ(st.signal, SIGTERM);
  EXPECT_EQ(p->Signal(SIGTERM).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SubprocessTest, StopEscalatesToKill) {
  auto p = *Subprocess::Start(
      Shell("trap '' TERM; echo ready; while true; do sleep 0.05; done"));
  ASSERT_EQ(*p->ReadLine(absl::Seconds(10)), "ready");
  ExitStatus st = p->Stop(absl::Milliseconds(100));
  EXPECT_EQ(st.signal, SIGKILL);
  EXPECT_NE(st.ToString().find("signal 9"), std::string::npos);
}

TEST(SubprocessTest, DestructorKillsTheChild) {
  pid_t pid;
  {
    auto p = *Subprocess::Start(Shell("exec sleep 30"));
    pid = p->pid();
  }
  EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process
}

TEST(SubprocessTest, ExecFailureIsReported) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/zeroshard-no-such-binary"};
  auto p = Subprocess::Start(o);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
  o.argv = {};
  EXPECT_EQ(Subprocess::Start(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SubprocessTest, EnvironmentAndFilesAndPath) {
  const std::string out = TempPath("sub_out");
  const std::string err = TempPath("sub_err");
  SubprocessOptions o;
  o.argv = {"sh", "-c", "echo $ZS_A-$ZS_B; echo oops >&2"};  // found in PATH
  o.env = {{"ZS_A", "x"}, {"ZS_B", "y"}};
  o.stdout_mode = SubprocessOptions::Output::kFile;
  o.stdout_path = out;
  o.stderr_mode = SubprocessOptions::Output::kFile;
  o.stderr_path = err;
  auto p = *Subprocess::Start(o);
  ASSERT_TRUE(p->Wait(absl::Seconds(10))->success());
  std::stringstream a, b;
  a << std::ifstream(out).rdbuf();
  b << std::ifstream(err).rdbuf();
  EXPECT_EQ(a.str(), "x-y\n");
  EXPECT_EQ(b.str(), "oops\n");
  std::remove(out.c_str());
  std::remove(err.c_str());
}

TEST(SubprocessTest, WaitForPortFile) {
  const std::string path = TempPath("port");
  std::remove(path.c_str());
  auto p = *Subprocess::Start(Shell(
      "sleep 0.1; echo 4242 > " + path + ".tmp; mv " + path + ".tmp " + path +
      "; exec sleep 30"));
  auto port = WaitForPortFile(path, absl::Seconds(10), p.get());
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 4242);
  std::remove(path.c_str());

  auto dead = *Subprocess::Start(Shell("exit 7"));
  auto st = WaitForPortFile(path, absl::Seconds(10), dead.get());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.status().message().find("code 7"), std::string::npos);
  EXPECT_EQ(WaitForPortFile(path, absl::Milliseconds(30)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace zeroshard
