#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace zeroshard {
namespace {

bool IsNameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
    return true;
  }
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

// "\\" and "\n" escaped (HELP text).
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} (empty for no labels), with `extra` (le="...") last.
std::string LabelText(const MetricLabels& labels,
                      const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::pair<std::string, std::string>& kv) {
    if (!first) out += ',';
    first = false;
    absl::StrAppend(&out, kv.first, "=\"", EscapeLabelValue(kv.second), "\"");
  };
  for (const auto& kv : labels) add(kv);
  if (extra != nullptr) add(*extra);
  out += '}';
  return out;
}

const char* TypeName(int type) {
  switch (type) {
    case 0: return "counter";
    case 1: return "gauge";
    default: return "histogram";
  }
}

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*colon=*/true)) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, /*colon=*/false)) return false;
  }
  return true;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 chars
  return std::string(buf, end);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // First bucket whose bound is >= v (le: less or equal); NaN goes to +Inf.
  const size_t i =
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1);
  sum_.fetch_add(v);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load();
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
          5,      10,      25,     50,    100};
}

MetricsRegistry::Series* MetricsRegistry::Find(absl::string_view name,
                                              absl::string_view help,
                                              Type type,
                                              const std::vector<double>& bounds,
                                              const MetricLabels& labels) {
  MetricLabels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string problem;
  if (!IsValidMetricName(name)) {
    problem = "is not a valid metric name";
  }
  for (size_t i = 0; problem.empty() && i < sorted.size(); ++i) {
    if (!IsValidLabelName(sorted[i].first) || sorted[i].first == "le" ||
        (i > 0 && sorted[i].first == sorted[i - 1].first)) {
      problem = absl::StrCat("has a bad or repeated label '", sorted[i].first,
                             "'");
    }
  }
  for (size_t i = 0; problem.empty() && i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
      problem = "has bucket bounds that are not finite and increasing";
    }
  }
  absl::MutexLock lock(&mu_);
  Family* family = nullptr;
  if (problem.empty()) {
    auto it = families_.find(name);
    if (it == families_.end()) {
      it = families_
               .emplace(std::string(name),
                        Family{type, std::string(help), bounds, {}})
               .first;
    }
    family = &it->second;
    if (family->type != type) {
      problem = absl::StrCat("is already a ",
                             TypeName(static_cast<int>(family->type)));
    } else if (family->bounds != bounds) {
      problem = "is already registered with other bucket bounds";
    }
  }
  if (!problem.empty()) {
    ZS_LOG(ERROR) << "metric " << name << " " << problem
                  << "; its updates are not exported";
    detached_.push_back(std::make_unique<Series>());
    Series* s = detached_.back().get();
    s->counter = std::make_unique<Counter>();
    s->gauge = std::make_unique<Gauge>();
    s->histogram = std::make_unique<Histogram>(std::vector<double>{});
    return s;
  }
  Series& s = family->series[sorted];
  switch (type) {
    case Type::kCounter:
      if (s.counter == nullptr) s.counter = std::make_unique<Counter>();
      break;
    case Type::kGauge:
      if (s.gauge == nullptr) s.gauge = std::make_unique<Gauge>();
      break;
    case Type::kHistogram:
      if (s.histogram == nullptr) {
        s.histogram = std::make_unique<Histogram>(bounds);
      }
      break;
  }
  return &s;
}

Counter& MetricsRegistry::counter(absl::string_view name,
                                  absl::string_view help,
                                  const MetricLabels& labels) {
  return *Find(name, help, Type::kCounter, {}, labels)->counter;
}

Gauge& MetricsRegistry::gauge(absl::string_view name, absl::string_view help,
                              const MetricLabels& labels) {
  return *Find(name, help, Type::kGauge, {}, labels)->gauge;
}

Histogram& MetricsRegistry::histogram(absl::string_view name,
                                      absl::string_view help,
                                      const std::vector<double>& bounds,
                                      const MetricLabels& labels) {
  return *Find(name, help, Type::kHistogram, bounds, labels)->histogram;
}

int MetricsRegistry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collect_mu_);
  const int id = next_collector_++;
  collectors_.emplace(id, std::move(collect));
  return id;
}

void MetricsRegistry::RemoveCollector(int id) {
  absl::MutexLock lock(&collect_mu_);
  collectors_.erase(id);
}

std::string MetricsRegistry::Render() {
  {
    absl::MutexLock lock(&collect_mu_);
    for (auto& [id, collect] : collectors_) collect();
  }
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help), "\n",
                    "# TYPE ", name, " ",
                    TypeName(static_cast<int>(family.type)), "\n");
    for (const auto& [labels, s] : family.series) {
      switch (family.type) {
        case Type::kCounter:
          absl::StrAppend(&out, name, LabelText(labels, nullptr), " ",
                          FormatMetricValue(s.counter->value()), "\n");
          break;
        case Type::kGauge:
          absl::StrAppend(&out, name, LabelText(labels, nullptr), " ",
                          FormatMetricValue(s.gauge->value()), "\n");
          break;
        case Type::kHistogram: {
          const std::vector<uint64_t> counts = s.histogram->bucket_counts();
          uint64_t cumulative = 0;
          for (size_t i = 0; i < counts.size(); ++i) {
            cumulative += counts[i];
            const std::pair<std::string, std::string> le(
                "le", i < family.bounds.size()
                          ? FormatMetricValue(family.bounds[i])
                          : "+Inf");
            absl::StrAppend(&out, name, "_bucket", LabelText(labels, &le), " ",
                            cumulative, "\n");
          }
          absl::StrAppend(&out, name, "_sum", LabelText(labels, nullptr), " ",
                          FormatMetricValue(s.histogram->sum()), "\n", name,
                          "_count", LabelText(labels, nullptr), " ",
                          cumulative, "\n");
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace zeroshard
