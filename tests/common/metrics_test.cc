// The metrics registry and its text exposition: what it prints reads back
// (tests/support/prometheus_text.h) to the same families and samples.
#include "common/metrics.h"

#include <cmath>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "absl/strings/match.h"
#include "tests/support/prometheus_text.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::Exposition;
using ::zeroshard::testing::ParseExposition;

Exposition Parse(MetricsRegistry& registry) {
  const std::string text = registry.Render();
  absl::StatusOr<Exposition> e = ParseExposition(text);
  EXPECT_TRUE(e.ok()) << e.status() << "\n" << text;
  return e.ok() ? *e : Exposition();
}

TEST(MetricsTest, CountersAndGaugesReadBackWithHelpAndType) {
  MetricsRegistry r;
  r.counter("zeroshard_a_total", "Things done.").Increment(3);
  r.counter("zeroshard_a_total", "Things done.").Increment(0.5);
  r.gauge("zeroshard_g", "A level.", {{"kind", "x"}}).Set(-2.25);
  r.gauge("zeroshard_g", "A level.", {{"kind", "y"}}).Set(1e20);
  const Exposition e = Parse(r);
  EXPECT_EQ(e.types.at("zeroshard_a_total"), "counter");
  EXPECT_EQ(e.types.at("zeroshard_g"), "gauge");
  EXPECT_EQ(e.help.at("zeroshard_a_total"), "Things done.");
  EXPECT_EQ(e.Value("zeroshard_a_total"), 3.5);
  EXPECT_EQ(e.Value("zeroshard_g", {{"kind", "x"}}), -2.25);
  EXPECT_EQ(e.Value("zeroshard_g", {{"kind", "y"}}), 1e20);
  EXPECT_EQ(e.samples.size(), 3u);
}

TEST(MetricsTest, ExactTextOfASmallRegistry) {
  MetricsRegistry r;
  r.counter("b_total", "B.", {{"z", "1"}, {"a", "2"}}).Increment(7);
  r.gauge("a", "A.").Set(0.1);
  // Families by name; labels sorted by name; shortest round-trip numbers.
  EXPECT_EQ(r.Render(),
            "# HELP a A.\n# TYPE a gauge\na 0.1\n"
            "# HELP b_total B.\n# TYPE b_total counter\n"
            "b_total{a=\"2\",z=\"1\"} 7\n");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry r;
  const std::string nasty = "a\\b\"c\nd";
  r.gauge("zeroshard_e", "line one\nback\\slash", {{"v", nasty}}).Set(1);
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "v=\"a\\\\b\\\"c\\nd\"")) << text;
  EXPECT_TRUE(absl::StrContains(text, "# HELP zeroshard_e line one\\nback\\\\slash"))
      << text;
  const Exposition e = Parse(r);
  EXPECT_EQ(e.Value("zeroshard_e", {{"v", nasty}}), 1);
  EXPECT_EQ(e.help.at("zeroshard_e"), "line one\nback\\slash");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  MetricsRegistry r;
  Histogram& h = r.histogram("zeroshard_d_seconds", "D.", {0.1, 1, 10},
                             {{"method", "Gather"}});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.Observe(v);
  const Exposition e = Parse(r);
  EXPECT_EQ(e.types.at("zeroshard_d_seconds"), "histogram");
  auto bucket = [&](const char* le) {
    return e.Value("zeroshard_d_seconds_bucket",
                   {{"method", "Gather"}, {"le", le}});
  };
  EXPECT_EQ(bucket("0.1"), 2);  // le is "less or equal"
  EXPECT_EQ(bucket("1"), 3);
  EXPECT_EQ(bucket("10"), 4);
  EXPECT_EQ(bucket("+Inf"), 5);
  EXPECT_EQ(e.Value("zeroshard_d_seconds_count", {{"method", "Gather"}}), 5);
  EXPECT_DOUBLE_EQ(
      *e.Value("zeroshard_d_seconds_sum", {{"method", "Gather"}}), 55.65);
}

TEST(MetricsTest, SpecialValuesAreSpelledThePrometheusWay) {
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatMetricValue(NAN), "NaN");
  EXPECT_EQ(FormatMetricValue(0.005), "0.005");
  EXPECT_EQ(FormatMetricValue(12345678), "12345678");
  MetricsRegistry r;
  r.gauge("g", "G.").Set(NAN);
  const Exposition e = Parse(r);
  ASSERT_TRUE(e.Value("g").has_value());
  EXPECT_TRUE(std::isnan(*e.Value("g")));
}

TEST(MetricsTest, MisuseIsDetachedNotRendered) {
  MetricsRegistry r;
  r.counter("zeroshard_x_total", "X.").Increment();
  // Same name, other type; a bad name; a bad label; other buckets.
  r.gauge("zeroshard_x_total", "X.").Set(5);
  r.counter("bad-name", "B.").Increment();
  r.counter("zeroshard_y_total", "Y.", {{"le", "1"}}).Increment();
  r.histogram("zeroshard_h", "H.", {1, 2}).Observe(1);
  r.histogram("zeroshard_h", "H.", {1, 3}).Observe(1);
  r.histogram("zeroshard_bad_bounds", "H.", {2, 1}).Observe(1);
  const Exposition e = Parse(r);
  EXPECT_EQ(e.Value("zeroshard_x_total"), 1);
  EXPECT_EQ(e.types.count("zeroshard_y_total"), 0u);
  EXPECT_EQ(e.types.count("zeroshard_bad_bounds"), 0u);
  EXPECT_EQ(e.Value("zeroshard_h_count"), 1);
  EXPECT_FALSE(IsValidMetricName("bad-name"));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_TRUE(IsValidMetricName("a:b_c1"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
}

TEST(MetricsTest, CollectorsRunPerRenderUntilRemoved) {
  MetricsRegistry r;
  int runs = 0;
  const int id = r.AddCollector([&] {
    ++runs;
    r.gauge("zeroshard_runs", "Runs.").Set(runs);
  });
  EXPECT_EQ(Parse(r).Value("zeroshard_runs"), 1);
  EXPECT_EQ(Parse(r).Value("zeroshard_runs"), 2);
  r.RemoveCollector(id);
  EXPECT_EQ(Parse(r).Value("zeroshard_runs"), 2);
  EXPECT_EQ(runs, 2);
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&r, t] {
      for (int i = 0; i < 10000; ++i) {
        r.counter("zeroshard_c_total", "C.").Increment();
        r.histogram("zeroshard_h_seconds", "H.", LatencyBuckets(),
                    {{"t", std::to_string(t % 2)}})
            .Observe(0.001);
        if (i % 1000 == 0) (void)r.Render();
      }
    });
  }
  for (auto& th : threads) th.join();
  const Exposition e = Parse(r);
  EXPECT_EQ(e.Value("zeroshard_c_total"), 40000);
  EXPECT_EQ(e.Value("zeroshard_h_seconds_count", {{"t", "0"}}), 20000);
  EXPECT_EQ(e.Value("zeroshard_h_seconds_count", {{"t", "1"}}), 20000);
}

TEST(PrometheusTextTest, TheReaderRejectsWhatIsNotTheFormat) {
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na 1").ok());  // no newline
  EXPECT_FALSE(ParseExposition("a 1\n").ok());                // no family
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na{x=\"1} 1\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na{x=\"\\q\"} 1\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na one\n").ok());
  EXPECT_FALSE(ParseExposition("# TYPE a gauge\na 1\n# TYPE a gauge\n").ok());
  EXPECT_TRUE(ParseExposition("# TYPE a gauge\na{x=\"1\",} 1 123\n").ok());
}

}  // namespace
}  // namespace zeroshard
