#include "common/logging.h"

#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
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

// The identity: set once at start, read by every line. A leaked string
// behind an atomic pointer, so that a line logged while it is being set
// reads either the old or the new one, never a torn one.
std::atomic<const std::string*> g_identity{nullptr};

}  // namespace

bool LogEnabled(LogSeverity severity) {
  return static_cast<int>(severity) >= MinLevel();
}

void SetLogIdentity(const std::string& identity) {
  // Every identity ever set is kept (set once per process, so a handful):
  // a line may still be reading the previous one, and a deque never moves
  // its elements, so the pointers stay valid and reachable (no leak).
  static std::mutex mu;
  static auto* kept = new std::deque<std::string>();
  if (identity.empty()) {
    g_identity.store(nullptr);
    return;
  }
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(identity);
  g_identity.store(&kept->back());
}

std::string LogLinePrefix(LogSeverity severity) {
  static const char kLetters[] = {'I', 'W', 'E'};
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm utc;
  gmtime_r(&tv.tv_sec, &utc);
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix),
                "%c%04d-%02d-%02dT%02d:%02d:%02d.%03dZ ",
                kLetters[static_cast<int>(severity)], utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                utc.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  std::string out = prefix;
  if (const std::string* identity = g_identity.load(); identity != nullptr) {
    out += *identity;
    out += ' ';
  }
  return out;
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line)
    : severity_(severity) {
  stream_ << LogLinePrefix(severity_) << Basename(file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write() so that lines from concurrent threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace zeroshard
