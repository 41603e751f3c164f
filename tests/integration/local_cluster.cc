#include "tests/integration/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace zeroshard::testing {

std::string BinDir() { return ZS_BIN_DIR; }

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    int num_servers, const std::vector<std::string>& extra_flags) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->dir_ = MakeTempDir("zs_cluster_");
  if (c->dir_.empty()) return absl::InternalError("mkdtemp failed");
  c->extra_flags_ = extra_flags;
  c->num_servers_ = num_servers;
  for (int k = 0; k < num_servers; ++k) {
    auto p = c->Spawn(k, "127.0.0.1:0");
    if (!p.ok()) return p.status();
    c->servers_.push_back(std::move(*p));
  }
  for (int k = 0; k < num_servers; ++k) {
    auto port = WaitForPortFile(absl::StrCat(c->dir_, "/", k, ".port"),
                                absl::Seconds(60), c->servers_[k].get());
    if (!port.ok()) {
      return absl::Status(port.status().code(),
                          absl::StrCat(port.status().message(), "; log: ",
                                       ReadFile(c->log_path(k))));
    }
    c->addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  return c;
}

LocalCluster::~LocalCluster() {
  for (auto& s : servers_) s->Stop(absl::Seconds(10));
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string LocalCluster::server_list() const {
  return absl::StrJoin(addresses_, ",");
}

absl::StatusOr<std::unique_ptr<Subprocess>> LocalCluster::Spawn(
    int k, const std::string& listen) const {
  SubprocessOptions o;
  o.argv = {BinDir() + "/zeroshard-server", "--listen=" + listen,
            absl::StrCat("--server_index=", k),
            absl::StrCat("--num_servers=", num_servers_),
            absl::StrCat("--port_file=", dir_, "/", k, ".port")};
  o.argv.insert(o.argv.end(), extra_flags_.begin(), extra_flags_.end());
  if (std::none_of(extra_flags_.begin(), extra_flags_.end(),
                   [](const std::string& f) {
                     return f.rfind("--credentials=", 0) == 0;
                   })) {
    o.argv.push_back("--no_auth");
  }
  o.stdout_mode = SubprocessOptions::Output::kDiscard;
  o.stderr_mode = SubprocessOptions::Output::kFile;
  o.stderr_path = log_path(k);
  o.env = {{"ZEROSHARD_OPTIMIZER_THREADS", "1"}};
  return Subprocess::Start(o);
}

absl::Status LocalCluster::Restart(int k) {
  Kill(k);
  std::error_code ec;
  const std::string port_file = absl::StrCat(dir_, "/", k, ".port");
  std::filesystem::remove(port_file, ec);
  ASSIGN_OR_RETURN(servers_[k], Spawn(k, addresses_[k]));
  return WaitForPortFile(port_file, absl::Seconds(60), servers_[k].get())
      .status();
}

void LocalCluster::Kill(int k) {
  servers_[k]->Signal(SIGKILL).IgnoreError();
  servers_[k]->Wait(absl::Seconds(10)).IgnoreError();
}

std::string LocalCluster::log_path(int k) const {
  return absl::StrCat(dir_, "/server", k, ".log");
}

absl::StatusOr<CommandResult> RunBinary(const std::string& name,
                                        const std::vector<std::string>& args,
                                        absl::Duration timeout) {
  const std::string dir = MakeTempDir("zs_cmd_");
  SubprocessOptions o;
  o.argv = {BinDir() + "/" + name};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_mode = SubprocessOptions::Output::kFile;
  o.stdout_path = dir + "/out";
  o.stderr_mode = SubprocessOptions::Output::kFile;
  o.stderr_path = dir + "/err";
  auto p = Subprocess::Start(o);
  if (!p.ok()) return p.status();
  auto st = (*p)->Wait(timeout);
  if (!st.ok()) {
    (*p)->Stop(absl::Seconds(1));
    return st.status();
  }
  CommandResult r{*st, ReadFile(dir + "/out"), ReadFile(dir + "/err")};
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

}  // namespace zeroshard::testing
