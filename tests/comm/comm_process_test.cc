// WorkerGroup on Gloo across real processes (fork + exec of comm_peer),
// rendezvous through a directory: results, and a peer killed mid-collective.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

struct Outcome {
  bool exited = false;
  int code = -1;
  int signal = 0;
};

// Starts `size` comm_peer processes and waits for all, killing any still
// running after `limit`.
std::vector<Outcome> RunPeers(int size, const std::string& mode,
                              absl::Duration limit) {
  char dir_template[] = "/tmp/zs-comm-test-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  EXPECT_NE(dir, nullptr);
  const std::string seed = std::to_string(std::random_device{}());
  std::printf("peers in %s, seed %s\n", dir, seed.c_str());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const std::string r = std::to_string(rank), n = std::to_string(size);
    pid_t pid = fork();
    if (pid == 0) {
      const char* args[] = {ZS_COMM_PEER_BINARY, dir, r.c_str(), n.c_str(),
                            seed.c_str(), mode.c_str(), nullptr};
      execv(args[0], const_cast<char* const*>(args));
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<Outcome> outcomes(size);
  std::vector<bool> done(size, false);
  const absl::Time deadline = absl::Now() + limit;
  int remaining = size;
  while (remaining > 0 && absl::Now() < deadline) {
    for (int r = 0; r < size; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --remaining;
        outcomes[r].exited = WIFEXITED(status);
        outcomes[r].code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        outcomes[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < size; ++r) {
    if (done[r]) continue;
    ADD_FAILURE() << "rank " << r << " still running after "
                  << absl::FormatDuration(limit) << "; killed";
    kill(pids[r], SIGKILL);
    waitpid(pids[r], nullptr, 0);
  }
  std::filesystem::remove_all(dir);
  return outcomes;
}

TEST(CommProcessTest, ThreeProcessesMatchSerialReferences) {
  auto outcomes = RunPeers(3, "check", absl::Seconds(60));
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].exited) << "rank " << r << " signal "
                                    << outcomes[r].signal;
    EXPECT_EQ(outcomes[r].code, 0) << "rank " << r;
  }
}

TEST(CommProcessTest, TwoProcessesMatchSerialReferences) {
  auto outcomes = RunPeers(2, "check", absl::Seconds(60));
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_EQ(outcomes[r].code, 0) << "rank " << r;
  }
}

TEST(CommProcessTest, KilledPeerGivesErrorNotHang) {
  auto outcomes = RunPeers(3, "vanish", absl::Seconds(60));
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  for (int r : {0, 1}) {
    EXPECT_TRUE(outcomes[r].exited) << "rank " << r << " killed by signal "
                                    << outcomes[r].signal;
    EXPECT_EQ(outcomes[r].code, 0) << "rank " << r
                                   << " (12: wrong error, 13: no error)";
  }
}

}  // namespace
}  // namespace zeroshard
