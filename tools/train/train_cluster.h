// The processes of one zeroshard-train run: S zeroshard-server and N
// zeroshard-worker children on this machine, watched as one unit.
//
//   TrainClusterPlan plan{.bin_dir = "build/bin", .config_path = "c.json",
//                         .out_dir = "out", .servers = 2, .workers = 2};
//   ASSIGN_OR_RETURN(auto cluster, TrainCluster::Start(plan, &interrupted));
//   while (true) {
//     ASSIGN_OR_RETURN(std::string line,
//                      cluster->NextProgressLine(absl::Seconds(120)));
//     ...
//   }
//   RETURN_IF_ERROR(cluster->WaitWorkers(absl::Seconds(60)));
//   cluster->StopAll(absl::Seconds(5));
//
// Contracts:
// - Servers listen on 127.0.0.1 port 0 and write their port to
//   <out>/ports/server<k>.port; Start waits for all of them (bounded by
//   plan.startup_timeout). With plan.server_addresses set, no server is
//   started and those addresses are used.
// - Each child's stderr goes to <out>/logs/<name>.log (server0.log,
//   worker1.log, ...); rank 0's stdout is the progress feed.
// - Children die with the launcher (PR_SET_PDEATHSIG via Subprocess, own
//   process groups so a terminal's Ctrl-C reaches only the launcher, which
//   then stops them), and the destructor stops whatever still runs.
// - Every failure names the process: "worker rank 1 exited with code 1:
//   <its last stderr line>", "server 0 (127.0.0.1:41234) killed by signal 9
//   (Killed)", "no progress for 120 s ...". Other processes that had failed
//   too are listed after it.
// - Must be used from the thread that called Start (PDEATHSIG is per thread).
#ifndef ZEROSHARD_TOOLS_TRAIN_TRAIN_CLUSTER_H_
#define ZEROSHARD_TOOLS_TRAIN_TRAIN_CLUSTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/subprocess.h"

namespace zeroshard {

struct TrainClusterPlan {
  std::string bin_dir;       // holds zeroshard-server and zeroshard-worker
  std::string config_path;   // the resolved configuration every worker reads
  std::string out_dir;       // logs/ and ports/ are created inside
  int servers = 1;
  int workers = 1;
  // zeroshard.replicas: with 2, a server that dies while both servers next
  // to it live is no failure (its slots live on; docs/DESIGN.md,
  // "Replicas").
  int replicas = 1;
  // Non-empty: use these servers (host:port in index order), start none.
  std::vector<std::string> server_addresses;
  Placement placement = Placement::kHost;
  // Credentials directory for every process (servers: --credentials; rank
  // 0: role admin, other ranks: role worker). Empty: servers --no_auth.
  std::string credentials_dir;
  int64_t inject_overflow_at_step = -1;   // passed on when >= 0
  // Passed on to rank 0 of the first attempt only, when >= 0.
  int64_t inject_partial_apply_at_step = -1;
  std::string init_from;                  // workers' --init_from, when set
  std::string run_id;                     // workers' --run_id (KV scope)
  std::string resume_dir;                 // workers' --resume (fresh servers
                                          // restore from its newest checkpoint)
  uint64_t attempt = 0;                   // workers' --attempt
  absl::Duration startup_timeout = absl::Seconds(60);
};

class TrainCluster {
 public:
  // Starts the servers (unless given), waits for their ports, then starts
  // the workers. `interrupted` (may be null) is polled during every wait.
  static absl::StatusOr<std::unique_ptr<TrainCluster>> Start(
      const TrainClusterPlan& plan, const std::atomic<bool>* interrupted);
  ~TrainCluster();
  TrainCluster(const TrainCluster&) = delete;
  TrainCluster& operator=(const TrainCluster&) = delete;

  const std::vector<std::string>& server_addresses() const {
    return addresses_;
  }
  std::string logs_dir() const { return plan_.out_dir + "/logs"; }

  // The next line rank 0 printed, waiting up to `timeout`. Fails (naming the
  // process) as soon as any process has failed, CANCELLED when interrupted,
  // DEADLINE_EXCEEDED ("no progress for ... waiting for <waiting_for>")
  // when nothing came in time; it names children the kernel reports as
  // stopped (e.g. by SIGSTOP) or stuck in uninterruptible sleep.
  absl::StatusOr<std::string> NextProgressLine(
      absl::Duration timeout, const std::string& waiting_for = "a line");

  // After rank 0's "done": waits up to `timeout` for every worker to exit,
  // each with code 0.
  absl::Status WaitWorkers(absl::Duration timeout);

  // True while every server this cluster started is running (always true
  // for given servers).
  bool ServersAlive();

  // Crash recovery: StopWorkers kills every worker still running and keeps
  // each old log as <log>.<attempt>; RestartWorkers then starts N new
  // workers with --attempt=`attempt` (a new worker group: the old one's
  // rendezvous keys are not reused).
  void StopWorkers();
  absl::Status RestartWorkers(uint64_t attempt);

  // SIGTERM to every child still running, up to `grace` for all of them
  // together, then SIGKILL. Idempotent.
  void StopAll(absl::Duration grace);
  // After StopAll, before a whole new cluster starts in the same folder:
  // every child's log is kept as <log>.<attempt>, as StopWorkers keeps the
  // workers', so that the restart writes fresh logs beside them.
  void KeepLogs();

  // A failure of any child so far (servers must not have exited at all;
  // workers must not have exited with a non-zero code), or OK.
  absl::Status CheckProcesses();

  // Writes <out>/cluster.json: run id, each child's name, pid, address and
  // log, so that operators (and failure-injection tests) can find them.
  absl::Status WriteClusterFile() const;

 private:
  struct Child {
    std::string name;      // "server 0 (127.0.0.1:4100)", "worker rank 1"
    std::string log_path;
    bool is_server = false;
    std::unique_ptr<Subprocess> process;
    std::optional<ExitStatus> exit;        // once seen
    absl::Time exit_seen = absl::InfiniteFuture();
    int replacements = 0;  // servers with replicas: times started again
    bool said_gone = false;
  };

  TrainCluster(TrainClusterPlan plan, const std::atomic<bool>* interrupted)
      : plan_(std::move(plan)), interrupted_(interrupted) {}

  // Starts `child`'s process with stdout as given, stderr to its log file;
  // the error names the child.
  static absl::Status StartChild(SubprocessOptions options, Child* child);
  // Where server k writes its port (<out>/ports/server<k>.port).
  std::string PortFile(int k) const;
  // zeroshard-server k listening at `listen`, writing its port to
  // `port_file`.
  SubprocessOptions ServerProcess(int k, const std::string& listen,
                                  const std::string& port_file) const;
  // With replicas: starts server k again at its address (its old log kept
  // as <log>.replacedN), and rewrites cluster.json.
  void ReplaceServer(int k);

  absl::Status StartServers();
  absl::Status StartWorkers();
  bool Interrupted() const {
    return interrupted_ != nullptr && interrupted_->load();
  }
  // Polls every child; records first-seen exit times.
  void PollAll();
  bool Failed(const Child& c) const;
  // Describes every failed child, earliest first.
  absl::Status FailureStatus();
  std::string Describe(const Child& c) const;
  // "; worker rank 1 is stopped" for children in state T/t/D, or "".
  std::string StuckChildren() const;

  TrainClusterPlan plan_;  // attempt changes on RestartWorkers
  const std::atomic<bool>* const interrupted_;
  std::vector<std::string> addresses_;
  std::vector<Child> servers_;
  std::vector<Child> workers_;
};

// The last non-empty line of a text file (at most the last 64 KiB are
// read), or "" when there is none.
std::string LastLineOf(const std::string& path);

}  // namespace zeroshard

#endif  // ZEROSHARD_TOOLS_TRAIN_TRAIN_CLUSTER_H_
