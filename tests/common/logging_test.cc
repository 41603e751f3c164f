// Log lines: severity, UTC time (ISO 8601 with milliseconds), the process
// identity once set, then file:line.
#include "common/logging.h"

#include <regex>

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

const std::regex kTime(
    "^[IWE]20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]"
    "\\.[0-9]{3}Z ");

TEST(LoggingTest, PrefixHasSeverityAndUtcTime) {
  SetLogIdentity("");
  const std::string p = LogLinePrefix(LogSeverity::kWarning);
  EXPECT_TRUE(std::regex_search(p, kTime)) << p;
  EXPECT_EQ(p[0], 'W');
  EXPECT_EQ(p.size(), std::string("W2026-11-29T12:00:00.123Z ").size()) << p;
}

TEST(LoggingTest, IdentityAppearsInEveryLineOnceSet) {
  SetLogIdentity("server 3");
  const std::string p = LogLinePrefix(LogSeverity::kInfo);
  EXPECT_TRUE(std::regex_search(p, kTime)) << p;
  EXPECT_EQ(p.substr(p.size() - 9), "server 3 ") << p;
  SetLogIdentity("worker 0");
  EXPECT_EQ(LogLinePrefix(LogSeverity::kError).substr(p.size() - 9),
            "worker 0 ");
  SetLogIdentity("");
  EXPECT_EQ(LogLinePrefix(LogSeverity::kInfo).find("worker"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard
