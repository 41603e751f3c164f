// S real zeroshard-server processes on 127.0.0.1 with port 0, for
// integration tests. Each writes its bound port to a file in a temporary
// directory; Start waits (bounded) for all of them. The destructor stops
// every server that is still running.
//
//   ASSERT_OK_AND_ASSIGN(auto cluster, LocalCluster::Start(2));
//   ShardClient::Create(cluster->addresses(), layout);
//   cluster->Kill(1);
#ifndef ZEROSHARD_TESTS_INTEGRATION_LOCAL_CLUSTER_H_
#define ZEROSHARD_TESTS_INTEGRATION_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "tests/support/test_files.h"  // MakeTempDir, ReadFile

namespace zeroshard::testing {

// <build>/bin, where zeroshard-server and zeroshard-ctl are.
std::string BinDir();

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      int num_servers, const std::vector<std::string>& extra_flags = {});
  ~LocalCluster();

  const std::vector<std::string>& addresses() const { return addresses_; }
  // "a:1,b:2".
  std::string server_list() const;
  // SIGKILL server k and reap it.
  void Kill(int k);
  // Kills server k and starts it again, empty, on the same address.
  absl::Status Restart(int k);
  // Where server k's stderr goes.
  std::string log_path(int k) const;

 private:
  LocalCluster() = default;
  absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(
      int k, const std::string& listen) const;
  std::string dir_;
  std::vector<std::string> extra_flags_;
  int num_servers_ = 0;
  std::vector<std::unique_ptr<Subprocess>> servers_;
  std::vector<std::string> addresses_;
};

// Runs a binary from BinDir() with args to completion (bounded), capturing
// stdout and stderr.
struct CommandResult {
  ExitStatus status;
  std::string out;
  std::string err;
};
absl::StatusOr<CommandResult> RunBinary(const std::string& name,
                                        const std::vector<std::string>& args,
                                        absl::Duration timeout);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_INTEGRATION_LOCAL_CLUSTER_H_
