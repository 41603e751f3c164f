#include "common/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace zeroshard {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// Resolves argv[0] against $PATH before fork (execvp is not safe after fork
// in a multi-threaded parent).
std::string ResolveProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  const char* path = std::getenv("PATH");
  if (path == nullptr) return prog;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", prog);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return prog;
}

ExitStatus FromWaitStatus(int status) {
  ExitStatus st;
  if (WIFEXITED(status)) {
    st.exited = true;
    st.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    st.signal = WTERMSIG(status);
  }
  return st;
}

// Opens the target of one output stream in the parent (so errors are
// reported before fork). Returns -1 for kInherit.
absl::StatusOr<int> OpenOutput(SubprocessOptions::Output mode,
                               const std::string& path, const char* which) {
  using Output = SubprocessOptions::Output;
  switch (mode) {
    case Output::kInherit:
      return -1;
    case Output::kDiscard: {
      int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (fd < 0) return ErrnoStatus(errno, "open /dev/null");
      return fd;
    }
    case Output::kFile: {
      if (path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(which, " mode is kFile but no path was given"));
      }
      int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0644);
      if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
      return fd;
    }
    case Output::kPipe:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported output mode for ", which));
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (exited) return absl::StrCat("exited with code ", code);
  return absl::StrCat("killed by signal ", signal, " (", strsignal(signal),
                      ")");
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const SubprocessOptions& options) {
  using Output = SubprocessOptions::Output;
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("Subprocess: argv is empty");
  }
  if (options.stderr_mode == Output::kPipe) {
    return absl::InvalidArgumentError(
        "Subprocess: stderr cannot be piped; use kFile");
  }
  const std::string program = ResolveProgram(options.argv[0]);

  // Everything the child needs is prepared here: after fork only
  // async-signal-safe calls are made.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    absl::string_view kv(*e);
    bool overridden = false;
    for (const auto& [k, v] : options.env) {
      if (absl::StartsWith(kv, absl::StrCat(k, "="))) overridden = true;
    }
    if (!overridden) env_storage.emplace_back(kv);
  }
  for (const auto& [k, v] : options.env) {
    env_storage.push_back(absl::StrCat(k, "=", v));
  }
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_fd = -1, err_fd = -1, pipe_read = -1;
  auto close_all = [&] {
    for (int fd : {out_fd, err_fd, pipe_read}) {
      if (fd >= 0) close(fd);
    }
  };
  if (options.stdout_mode == Output::kPipe) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
    pipe_read = p[0];
    out_fd = p[1];
  } else {
    auto fd = OpenOutput(options.stdout_mode, options.stdout_path, "stdout");
    if (!fd.ok()) return fd.status();
    out_fd = *fd;
  }
  auto efd = OpenOutput(options.stderr_mode, options.stderr_path, "stderr");
  if (!efd.ok()) {
    close_all();
    return efd.status();
  }
  err_fd = *efd;

  // exec errors come back through this pipe (closed by a successful exec).
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    close_all();
    return ErrnoStatus(errno, "pipe2");
  }
  const pid_t parent = getpid();
  const char* workdir =
      options.working_dir.empty() ? nullptr : options.working_dir.c_str();
  const bool die_with_parent = options.die_with_parent;

  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close_all();
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    return ErrnoStatus(err, "fork");
  }
  if (pid == 0) {
    // Child.
    if (die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    setpgid(0, 0);  // own process group: terminal signals reach the parent only
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    int err = 0;
    if (workdir != nullptr && chdir(workdir) != 0) {
      err = errno;
    } else {
      // dup2'ed descriptors 0-2 lose O_CLOEXEC; everything else keeps it.
      execve(program.c_str(), argv.data(), envp.data());
      err = errno;
    }
    ssize_t ignored = write(exec_pipe[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }

  // Parent.
  close(exec_pipe[1]);
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (n == sizeof(child_errno)) {
    int status;
    waitpid(pid, &status, 0);
    if (pipe_read >= 0) close(pipe_read);
    return ErrnoStatus(child_errno, absl::StrCat("cannot execute ", program));
  }

  std::unique_ptr<Subprocess> p(new Subprocess());
  p->pid_ = pid;
  p->name_ = options.argv[0];
  p->stdout_fd_ = pipe_read;
  return p;
}

Subprocess::~Subprocess() {
  if (!exit_.has_value() && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Duration timeout) {
  if (stdout_fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": stdout is not piped"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t nl = stdout_buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = stdout_buffer_.substr(0, nl);
      stdout_buffer_.erase(0, nl + 1);
      return line;
    }
    if (stdout_eof_) {
      if (!stdout_buffer_.empty()) {
        std::string line = std::move(stdout_buffer_);
        stdout_buffer_.clear();
        return line;
      }
      return absl::OutOfRangeError(absl::StrCat(name_, ": end of output"));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          name_, ": no line on stdout within ", absl::FormatDuration(timeout)));
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    int r = poll(&pfd, 1, ms);
    if (r < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(errno, "read");
    }
    if (n == 0) {
      stdout_eof_ = true;
    } else {
      stdout_buffer_.append(buf, static_cast<size_t>(n));
    }
  }
}

std::optional<ExitStatus> Subprocess::Poll() {
  if (exit_.has_value()) return exit_;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) exit_ = FromWaitStatus(status);
  return exit_;
}

absl::StatusOr<ExitStatus> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration sleep = absl::Milliseconds(1);
  while (true) {
    if (auto st = Poll(); st.has_value()) return *st;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, " (pid ", pid_, ") still running after ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(sleep, deadline - absl::Now()));
    sleep = std::min(sleep * 2, absl::Milliseconds(20));
  }
}

absl::Status Subprocess::Signal(int sig) {
  if (exit_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " has already ", exit_->ToString()));
  }
  if (kill(pid_, sig) != 0) return ErrnoStatus(errno, "kill");
  return absl::OkStatus();
}

ExitStatus Subprocess::Stop(absl::Duration grace) {
  if (auto st = Poll(); st.has_value()) return *st;
  kill(pid_, SIGTERM);
  if (auto st = Wait(grace); st.ok()) return *st;
  kill(pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_ = FromWaitStatus(status);
  return *exit_;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path,
                                    absl::Duration timeout, Subprocess* child) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::ifstream in(path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      int port = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ss.str()), &port) &&
          port > 0 && port < 65536) {
        return port;
      }
    }
    if (child != nullptr) {
      if (auto st = child->Poll(); st.has_value()) {
        return absl::FailedPreconditionError(
            absl::StrCat(child->name(), " ", st->ToString(),
                         " before writing its port file ", path));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no port in ", path, " within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace zeroshard
