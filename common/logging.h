// A small logging facility (Debian's Abseil has no absl/log).
//
//   ZS_LOG(INFO) << "listening on " << port;
//   ZS_LOG(ERROR) << status;
//
// Lines go to stderr, one line per event, as
//
//   I2026-11-29T12:00:00.123Z server 1 shard_server.cc:42] message
//
// severity letter (I, W, E), the UTC time (ISO 8601, milliseconds), the
// process identity set once at start (SetLogIdentity("server 1"), "worker 0";
// omitted until set), the source file:line, and the message. The level below
// which lines are dropped comes from the environment variable
// ZEROSHARD_LOG_LEVEL (0=INFO, 1=WARNING, 2=ERROR; default 0). Logging never
// terminates the process.
#ifndef ZEROSHARD_COMMON_LOGGING_H_
#define ZEROSHARD_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace zeroshard {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

// Collects one line and writes it atomically to stderr on destruction.
class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// True when lines of this severity are written.
bool LogEnabled(LogSeverity severity);

// Names this process in every later line ("server 1", "worker 0"). Call
// once at start, before other threads log; an empty name removes it.
void SetLogIdentity(const std::string& identity);

// The prefix of a line logged now: "I2026-11-29T12:00:00.123Z server 1 "
// (file:line follows). Exposed for tests.
std::string LogLinePrefix(LogSeverity severity);

}  // namespace zeroshard

#define ZS_LOG_SEVERITY_INFO ::zeroshard::LogSeverity::kInfo
#define ZS_LOG_SEVERITY_WARNING ::zeroshard::LogSeverity::kWarning
#define ZS_LOG_SEVERITY_ERROR ::zeroshard::LogSeverity::kError

#define ZS_LOG(level)                                       \
  if (!::zeroshard::LogEnabled(ZS_LOG_SEVERITY_##level)) {  \
  } else                                                    \
    ::zeroshard::LogMessage(ZS_LOG_SEVERITY_##level, __FILE__, __LINE__).stream()

#endif  // ZEROSHARD_COMMON_LOGGING_H_
