// A strict reader of the Prometheus text exposition format 0.0.4, for tests:
// what common/metrics.h prints must read back to the same samples.
//
//   ASSERT_OK_AND_ASSIGN(Exposition e, ParseExposition(registry.Render()));
//   EXPECT_EQ(e.types["zeroshard_loss"], "gauge");
//   EXPECT_EQ(e.Value("zeroshard_chunk_version", {{"bound", "min"}}), 3);
#ifndef ZEROSHARD_TESTS_SUPPORT_PROMETHEUS_TEXT_H_
#define ZEROSHARD_TESTS_SUPPORT_PROMETHEUS_TEXT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> help;   // family -> unescaped text
  std::map<std::string, std::string> types;  // family -> counter|gauge|...
  std::vector<Sample> samples;
  // The value of the sample `name` with exactly `labels`; nullopt if none.
  std::optional<double> Value(
      absl::string_view name,
      const std::map<std::string, std::string>& labels = {}) const;
};

// INVALID_ARGUMENT naming the line for anything that is not the format: a
// bad name, an unterminated or badly escaped label value, a value that is
// not a number, a TYPE after its family's samples, a sample of no declared
// family, a line without its newline.
absl::StatusOr<Exposition> ParseExposition(absl::string_view text);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_SUPPORT_PROMETHEUS_TEXT_H_
