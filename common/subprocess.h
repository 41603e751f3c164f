// A child process with bounded waits: fork/exec of an argv vector with extra
// environment variables, stdout/stderr inherited, sent to files, discarded or
// (stdout only) piped back for line reading; signals; and a kill on
// destruction so that no test or launcher leaves a process behind.
//
//   SubprocessOptions opt;
//   opt.argv = {"/path/zeroshard-server", "--listen=127.0.0.1:0"};
//   opt.stdout_mode = SubprocessOptions::Output::kPipe;
//   ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(opt));
//   ASSIGN_OR_RETURN(std::string line, p->ReadLine(absl::Seconds(10)));
//   ExitStatus st = p->Stop(absl::Seconds(5));   // SIGTERM, then SIGKILL
//
// Contracts:
// - Every wait takes a timeout; none blocks longer than it (plus a few ms).
// - The destructor sends SIGKILL to a child still running and reaps it.
// - With die_with_parent (default), the kernel kills the child when the
//   *thread* that called Start exits (PR_SET_PDEATHSIG): start long-lived
//   children from a thread that outlives them (e.g. main).
// - Not thread-safe: one owner thread per Subprocess.
#ifndef ZEROSHARD_COMMON_SUBPROCESS_H_
#define ZEROSHARD_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace zeroshard {

struct SubprocessOptions {
  enum class Output { kInherit, kFile, kDiscard, kPipe };
  // argv[0] is the program: a path, or a name searched in $PATH.
  std::vector<std::string> argv;
  // Added to (or overriding) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // Where the child's stdout / stderr go. kPipe is valid for stdout only;
  // kFile needs the matching path (created or truncated).
  Output stdout_mode = Output::kInherit;
  std::string stdout_path;
  Output stderr_mode = Output::kInherit;
  std::string stderr_path;
  // Working directory of the child; empty: the parent's.
  std::string working_dir;
  // Kill the child (SIGKILL) when the starting thread exits.
  bool die_with_parent = true;
};

// How a child ended.
struct ExitStatus {
  bool exited = false;  // exited normally with `code`
  int code = 0;
  int signal = 0;       // killed by this signal when !exited
  bool success() const { return exited && code == 0; }
  // "exited with code 3", "killed by signal 9 (Killed)".
  std::string ToString() const;
};

class Subprocess {
 public:
  // Starts the child. INVALID_ARGUMENT for an empty argv or a bad output
  // mode; NOT_FOUND / PERMISSION_DENIED etc. when the program cannot be
  // executed (the exec error is reported here, not as an exit code).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const SubprocessOptions& options);

  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // The program name, for messages.
  const std::string& name() const { return name_; }

  // Next line of stdout (without the newline), waiting up to `timeout`.
  // FAILED_PRECONDITION when stdout is not piped, OUT_OF_RANGE at end of
  // output, DEADLINE_EXCEEDED when no full line came in time.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);

  // The exit status if the child has ended (reaps it), nullopt otherwise.
  std::optional<ExitStatus> Poll();
  // Waits up to `timeout` for the child to end; DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<ExitStatus> Wait(absl::Duration timeout);
  // Sends a signal; FAILED_PRECONDITION once the child has been reaped.
  absl::Status Signal(int sig);
  // SIGTERM, wait up to `grace`, then SIGKILL and reap. Always returns the
  // final status.
  ExitStatus Stop(absl::Duration grace);

 private:
  Subprocess() = default;

  pid_t pid_ = -1;
  std::string name_;
  int stdout_fd_ = -1;
  std::string stdout_buffer_;
  bool stdout_eof_ = false;
  std::optional<ExitStatus> exit_;
};

// Waits up to `timeout` for `path` to hold a port number (written atomically
// by a server once it serves) and returns it. When `child` is given and it
// exits first, FAILED_PRECONDITION naming its exit status.
absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                    absl::Duration timeout,
                                    Subprocess* child = nullptr);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_SUBPROCESS_H_
