// ClientSecurity::Load on a credentials directory this user may not read:
// the message says so (permission denied, the owner and mode), instead of
// "has neither ca.pem nor ctl.token" for files that are there.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "wire/credentials.h"

namespace zeroshard {
namespace {

TEST(ClientSecurityTest, AnUnreadableDirectoryIsSaidToBeOne) {
  char tmpl[] = "/tmp/zs_creds_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string parent = tmpl, dir = parent + "/credentials";
  ASSERT_EQ(chmod(parent.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  std::ofstream(dir + "/ctl.token") << "0123456789abcdef\n";
  // Readable to its owner: loads.
  ASSERT_TRUE(ClientSecurity::Load(dir, Role::kCtl).ok());

  // Another user: as root, a child that drops to nobody; otherwise the
  // directory loses its owner's permissions.
  const bool root = geteuid() == 0;
  if (!root) ASSERT_EQ(chmod(dir.c_str(), 0), 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    if (root && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    const auto s = ClientSecurity::Load(dir, Role::kCtl);
    const std::string text =
        s.ok() ? std::string("loaded") : s.status().ToString();
    const ssize_t n = write(fds[1], text.data(), text.size());
    _exit(n == static_cast<ssize_t>(text.size()) ? 0 : 4);
  }
  close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  chmod(dir.c_str(), 0700);
  std::filesystem::remove_all(parent);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << got;
  EXPECT_NE(got.find("PERMISSION_DENIED"), std::string::npos) << got;
  EXPECT_NE(got.find("cannot be read (Permission denied"), std::string::npos)
      << got;
  EXPECT_EQ(got.find("has neither"), std::string::npos) << got;
}

}  // namespace
}  // namespace zeroshard
