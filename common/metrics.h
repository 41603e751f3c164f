// A small metrics registry (counters, gauges, histograms with labels) and
// its Prometheus text exposition (format 0.0.4). The HTTP endpoint that
// serves it is separate (common/metrics_http.h).
//
//   MetricsRegistry registry;
//   Counter& bytes = registry.counter("zeroshard_rpc_received_bytes_total",
//                                     "Payload bytes received.");
//   bytes.Increment(n);
//   Histogram& latency = registry.histogram(
//       "zeroshard_rpc_duration_seconds", "RPC latency.", LatencyBuckets(),
//       {{"method", "Gather"}, {"code", "OK"}});
//   latency.Observe(0.004);
//   registry.AddCollector([&] { rss.Set(ReadRss()); });  // run per Render
//   std::string text = registry.Render();
//
// A family is one metric name with one type, help text and (histograms)
// bucket bounds; each distinct label set is one series in it, created on
// first use and living as long as the registry (references stay valid).
// A name or label that is not valid Prometheus syntax, or a type or bucket
// mismatch with the family already registered, is a programming error: it
// is logged and the returned series is a detached one that is never
// rendered. Thread-safe; series updates are lock-free atomics.
#ifndef ZEROSHARD_COMMON_METRICS_H_
#define ZEROSHARD_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard {

// Label name -> value pairs of one series (order does not matter).
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing total.
class Counter {
 public:
  void Increment(double v = 1) { value_.fetch_add(v); }
  // For a counter mirrored from a total kept elsewhere (at collect time):
  // sets the value; the caller keeps it monotonic.
  void SetTotal(double v) { value_.store(v); }
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v); }
  void Add(double v) { value_.fetch_add(v); }
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

// Counts of observations in cumulative buckets (upper bounds `le`), their
// sum and count.
class Histogram {
 public:
  // `bounds`: strictly increasing finite upper bounds; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), the last one being +Inf.
  std::vector<uint64_t> bucket_counts() const;
  double sum() const { return sum_.load(); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
};

// Bucket bounds for durations in seconds: 100 us to 100 s, about three per
// decade.
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Counter& counter(absl::string_view name, absl::string_view help,
                   const MetricLabels& labels = {});
  Gauge& gauge(absl::string_view name, absl::string_view help,
               const MetricLabels& labels = {});
  Histogram& histogram(absl::string_view name, absl::string_view help,
                       const std::vector<double>& bounds,
                       const MetricLabels& labels = {});

  // `collect` runs at the start of every Render (e.g. to set gauges from
  // live state). Returns an id for RemoveCollector, which waits for a
  // running Render's call to finish: after it returns, `collect` is never
  // called again.
  int AddCollector(std::function<void()> collect);
  void RemoveCollector(int id);

  // Runs the collectors, then writes every family in the text exposition
  // format 0.0.4: "# HELP", "# TYPE", then one line per sample; families by
  // name, series by labels.
  std::string Render();

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;
    // Sorted label pairs -> series.
    std::map<MetricLabels, Series> series;
  };
  // The series of `labels` in family `name` (created as needed); null after
  // logging the error when the name, labels, type or bounds do not fit.
  Series* Find(absl::string_view name, absl::string_view help, Type type,
               const std::vector<double>& bounds, const MetricLabels& labels);

  absl::Mutex collect_mu_;  // held while collectors run; before mu_
  std::map<int, std::function<void()>> collectors_
      ABSL_GUARDED_BY(collect_mu_);
  int next_collector_ ABSL_GUARDED_BY(collect_mu_) = 1;

  absl::Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  // Series returned for a misuse: updated, never rendered.
  std::vector<std::unique_ptr<Series>> detached_ ABSL_GUARDED_BY(mu_);
};

// Prometheus syntax: metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* (not starting with "__").
bool IsValidMetricName(absl::string_view name);
bool IsValidLabelName(absl::string_view name);
// A label value in double quotes' escaping: \ -> \\, " -> \", newline -> \n.
std::string EscapeLabelValue(absl::string_view value);
// A sample value or bucket bound: shortest round-trip form; "+Inf", "-Inf",
// "NaN".
std::string FormatMetricValue(double v);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_METRICS_H_
