#include "tests/support/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace zeroshard::testing {
namespace {

bool NameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == ':' || (!first && c >= '0' && c <= '9');
}

// Reads a metric or label name at the front of `s`.
std::string TakeName(absl::string_view& s) {
  size_t n = 0;
  while (n < s.size() && NameChar(s[n], n == 0)) ++n;
  std::string out(s.substr(0, n));
  s.remove_prefix(n);
  return out;
}

std::optional<double> ParseValue(absl::string_view v) {
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  double d = 0;
  if (!absl::SimpleAtod(v, &d)) return std::nullopt;
  return d;
}

// The family a sample belongs to: its name, or for histograms and
// summaries the name without _bucket, _sum or _count.
std::string FamilyOf(const std::string& name,
                     const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (absl::EndsWith(name, suffix)) {
      std::string base = name.substr(0, name.size() - suffix.size());
      auto it = types.find(base);
      if (it != types.end() &&
          (it->second == "histogram" || it->second == "summary")) {
        return base;
      }
    }
  }
  return "";
}

}  // namespace

std::optional<double> Exposition::Value(
    absl::string_view name,
    const std::map<std::string, std::string>& labels) const {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

absl::StatusOr<Exposition> ParseExposition(absl::string_view text) {
  Exposition out;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the text does not end with a newline");
  }
  std::set<std::string> sampled;  // families with samples so far
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, " '", line, "': ", why));
    };
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "# ")) {
      absl::string_view rest = line;
      const bool is_help = absl::ConsumePrefix(&rest, "HELP ");
      const bool is_type = !is_help && absl::ConsumePrefix(&rest, "TYPE ");
      if (!is_help && !is_type) continue;  // a comment
      std::string name = TakeName(rest);
      if (name.empty() || !absl::ConsumePrefix(&rest, " ")) {
        return bad("no metric name");
      }
      if (is_help) {
        std::string help;
        for (size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] != '\\') {
            help += rest[i];
          } else if (i + 1 < rest.size() && rest[i + 1] == '\\') {
            help += '\\', ++i;
          } else if (i + 1 < rest.size() && rest[i + 1] == 'n') {
            help += '\n', ++i;
          } else {
            return bad("bad escape in HELP");
          }
        }
        out.help[name] = help;
      } else {
        static const std::set<std::string> kTypes = {
            "counter", "gauge", "histogram", "summary", "untyped"};
        if (!kTypes.count(std::string(rest))) return bad("unknown type");
        if (sampled.count(name) || out.types.count(name)) {
          return bad("TYPE after the family's samples, or twice");
        }
        out.types[name] = std::string(rest);
      }
      continue;
    }
    Sample sample;
    absl::string_view rest = line;
    sample.name = TakeName(rest);
    if (sample.name.empty()) return bad("no metric name");
    if (absl::ConsumePrefix(&rest, "{")) {
      while (!absl::ConsumePrefix(&rest, "}")) {
        std::string label = TakeName(rest);
        if (label.empty() || !absl::ConsumePrefix(&rest, "=\"")) {
          return bad("bad label");
        }
        std::string value;
        bool closed = false;
        while (!rest.empty()) {
          const char c = rest.front();
          rest.remove_prefix(1);
          if (c == '"') {
            closed = true;
            break;
          }
          if (c != '\\') {
            value += c;
            continue;
          }
          if (rest.empty()) return bad("escape at the end");
          const char e = rest.front();
          rest.remove_prefix(1);
          if (e == '\\' || e == '"') {
            value += e;
          } else if (e == 'n') {
            value += '\n';
          } else {
            return bad("bad escape in a label value");
          }
        }
        if (!closed) return bad("unterminated label value");
        if (!sample.labels.emplace(label, value).second) {
          return bad("repeated label");
        }
        if (!absl::ConsumePrefix(&rest, ",") && !absl::StartsWith(rest, "}")) {
          return bad("expected ',' or '}'");
        }
      }
    }
    if (!absl::ConsumePrefix(&rest, " ")) return bad("no value");
    std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ');
    if (fields.empty() || fields.size() > 2) return bad("bad value fields");
    std::optional<double> v = ParseValue(fields[0]);
    if (!v.has_value()) return bad("value is not a number");
    sample.value = *v;
    const std::string family = FamilyOf(sample.name, out.types);
    if (family.empty()) return bad("sample of no declared family");
    sampled.insert(family);
    out.samples.push_back(std::move(sample));
  }
  return out;
}

}  // namespace zeroshard::testing
