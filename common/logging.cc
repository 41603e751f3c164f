#include "common/logging.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace zeroshard {
namespace {

int MinLevel() {
  static const int level = [] {
    const char* env = std::getenv("ZEROSHARD_LOG_LEVEL");
    if (env == nullptr) return 0;
    return std::atoi(env);
  }();
  return level;
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

}  // namespace

bool LogEnabled(LogSeverity severity) {
  return static_cast<int>(severity) >= MinLevel();
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity) {
  static const char kLetters[] = {'I', 'W', 'E'};
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix), "%c%02d%02d %02d:%02d:%02d.%03d ",
                kLetters[static_cast<int>(severity_)], local.tm_mon + 1,
                local.tm_mday, local.tm_hour, local.tm_min, local.tm_sec,
                static_cast<int>(tv.tv_usec / 1000));
  stream_ << prefix << Basename(file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write() so that lines from concurrent threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace zeroshard
