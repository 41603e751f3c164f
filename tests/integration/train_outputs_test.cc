// zeroshard-train's output pieces without processes: the progress-feed
// parser, metrics rows, the SVG loss curve, the summary and the ETA text.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "report/loss_plot.h"
#include "report/metrics_writer.h"
#include "report/progress_bar.h"
#include "tools/train/run_summary.h"
#include "common/progress_event.h"
#include "gtest/gtest.h"
#include "tests/support/test_files.h"

namespace zeroshard {
namespace {

TEST(MetricsWriterTest, CsvRowHasOneCellPerHeaderColumn) {
  StepRecord r;
  r.step = 3;
  r.loss = 2.5;
  r.skipped = true;
  const std::vector<std::string> header =
      absl::StrSplit(MetricsCsvHeader(), ',');
  const std::vector<std::string> row =
      absl::StrSplit(FormatMetricsRow(r, MetricsFormat::kCsv), ',');
  ASSERT_EQ(header.size(), row.size());
  EXPECT_EQ(header[0], "step");
  EXPECT_EQ(row[0], "3");
  EXPECT_EQ(row[6], "true");
  const std::string jsonl = FormatMetricsRow(r, MetricsFormat::kJsonl);
  auto back = ParseWorkerEvent("{\"event\":\"step\"," + jsonl.substr(1));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->record.step, 3u);
  EXPECT_DOUBLE_EQ(back->record.loss, 2.5);
  EXPECT_TRUE(back->record.skipped);
  r.grad_norm = std::numeric_limits<double>::infinity();
  const std::string inf_row = FormatMetricsRow(r, MetricsFormat::kJsonl);
  EXPECT_NE(inf_row.find("\"grad_norm\":null"), std::string::npos) << inf_row;
}

std::vector<StepRecord> Records(const std::vector<double>& losses) {
  std::vector<StepRecord> out;
  for (size_t i = 0; i < losses.size(); ++i) {
    StepRecord r;
    r.step = i;
    r.loss = losses[i];
    r.tokens_per_s = 100.0 * (i + 1);
    r.loss_scale = 8;
    r.skipped = i == 1;
    out.push_back(r);
  }
  return out;
}

// A resumed run continues the metrics file of its --out: the rows before
// the checkpoint's step stay (and come back for the plot), the later ones
// (steps made again) go, new rows append; a file not in the format is
// refused and left as it was.
TEST(MetricsWriterTest, ContinueKeepsTheRowsBeforeTheResumedStep) {
  const std::string dir = testing::MakeTempDir("zs_metrics_");
  for (const MetricsFormat format : {MetricsFormat::kCsv, MetricsFormat::kJsonl}) {
    const std::string path = dir + (format == MetricsFormat::kCsv
                                        ? "/m.csv" : "/m.jsonl");
    {
      auto w = MetricsWriter::Open(path, format);
      ASSERT_TRUE(w.ok()) << w.status();
      for (uint64_t s = 0; s < 6; ++s) {
        StepRecord r;
        r.step = s;
        r.loss = 10.0 - s;
        if (s == 2) r.val_loss = 7.5;
        ASSERT_TRUE((*w)->Append(r).ok());
      }
    }
    std::vector<StepRecord> kept;
    {
      auto w = MetricsWriter::Continue(path, format, 4, &kept);
      ASSERT_TRUE(w.ok()) << w.status();
      StepRecord r;
      r.step = 4;
      r.loss = 1.25;
      ASSERT_TRUE((*w)->Append(r).ok());
    }
    ASSERT_EQ(kept.size(), 4u);
    EXPECT_EQ(kept[3].step, 3u);
    EXPECT_EQ(kept[3].loss, 7.0);
    EXPECT_EQ(kept[2].val_loss, 7.5);
    EXPECT_TRUE(std::isnan(kept[1].val_loss));
    const std::string text = testing::ReadFile(path);
    std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
    const size_t header = format == MetricsFormat::kCsv ? 1 : 0;
    ASSERT_EQ(lines.size(), header + 5) << text;
    StepRecord last;
    last.step = 4;
    last.loss = 1.25;
    EXPECT_EQ(lines.back(), FormatMetricsRow(last, format));
    // Another format's file: refused, unchanged.
    const MetricsFormat other = format == MetricsFormat::kCsv
                                    ? MetricsFormat::kJsonl : MetricsFormat::kCsv;
    EXPECT_EQ(MetricsWriter::Continue(path, other, 2, nullptr).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(testing::ReadFile(path), text);
  }
}

TEST(LossPlotTest, SvgHasAPointPerStepAndMarksSkippedSteps) {
  const std::string svg = RenderLossSvg(Records({5, 4, 3.5, 3}), "t<1>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("t&lt;1&gt;"), std::string::npos);
  const size_t a = svg.find(" d=\"M");
  ASSERT_NE(a, std::string::npos);
  const std::string pts = svg.substr(a + 4, svg.find('"', a + 4) - a - 4);
  EXPECT_EQ(std::count(pts.begin(), pts.end(), ','), 4) << pts;
  EXPECT_EQ(std::count(pts.begin(), pts.end(), 'L'), 3) << pts;
  EXPECT_NE(svg.find("<circle"), std::string::npos);  // step 1 skipped
  // Degenerate inputs still give a document.
  EXPECT_NE(RenderLossSvg({}, "").find("</svg>"), std::string::npos);
  EXPECT_NE(RenderLossSvg(Records({2}), "").find("</svg>"), std::string::npos);
}

TEST(LossPlotTest, OnlySvgAndPngPaths) {
  EXPECT_TRUE(ValidatePlotPath("a/loss.svg").ok());
  EXPECT_TRUE(ValidatePlotPath("loss.PNG").ok());
  EXPECT_TRUE(ValidatePlotPath("").ok());
  auto bad = ValidatePlotPath("loss.pdf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("zeroshard.plot"), std::string::npos);
}

TEST(RunSummaryTest, FiguresFromRecords) {
  std::vector<double> losses;
  for (int i = 0; i < 25; ++i) losses.push_back(5.0 - 0.1 * i);
  RunSummary s = Summarize(Records(losses), /*tokens_per_step=*/256, 12.5);
  EXPECT_EQ(s.steps, 25u);
  EXPECT_DOUBLE_EQ(s.first_loss, 5.0);
  EXPECT_NEAR(s.last_loss, 2.6, 1e-12);
  EXPECT_NEAR(s.first10_mean, 5.0 - 0.45, 1e-12);
  EXPECT_NEAR(s.last10_mean, 5.0 - 0.1 * 19.5, 1e-12);
  EXPECT_DOUBLE_EQ(s.median_tokens_per_s, 1300);
  EXPECT_EQ(s.total_tokens, 25u * 256);
  EXPECT_EQ(s.skipped_steps, 1u);
  EXPECT_DOUBLE_EQ(s.final_loss_scale, 8);
  const std::string text = FormatSummary(s, {.metrics = "m.csv"});
  EXPECT_NE(text.find("m.csv"), std::string::npos);
  EXPECT_EQ(text.find("weights"), std::string::npos);
  EXPECT_EQ(Summarize({}, 256, 1).steps, 0u);
}

TEST(ProgressBarTest, LineAndEta) {
  EXPECT_EQ(FormatEta(5), "5s");
  EXPECT_EQ(FormatEta(125), "2m05s");
  EXPECT_EQ(FormatEta(3720), "1h02m");
  ProgressBar bar(stderr, 0, 10, 5, false);
  StepRecord r;
  r.step = 4;
  r.loss = 3.5;
  r.seconds = 2;
  bar.Update(r);
  const std::string line = bar.Line(r);
  EXPECT_NE(line.find("5/10"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 10s"), std::string::npos) << line;
}

// The validation loss reaches every output: the progress feed (only when
// evaluated), the metrics row (empty / null otherwise), the plot's second
// line, the summary and the progress line.
TEST(ValidationLossTest, InFeedMetricsPlotSummaryAndProgress) {
  std::vector<StepRecord> recs = Records({5, 4, 3.5, 3});
  WorkerEvent e;
  e.kind = WorkerEvent::Kind::kStep;
  e.record = recs[0];
  const std::string without = FormatWorkerEvent(e);
  EXPECT_EQ(without.find("val_loss"), std::string::npos) << without;
  auto back = ParseWorkerEvent(without);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(std::isnan(back->record.val_loss));
  recs[1].val_loss = 4.25;
  recs[3].val_loss = 3.125;
  e.record = recs[1];
  back = ParseWorkerEvent(FormatWorkerEvent(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->record.val_loss, 4.25);

  const std::vector<std::string> header = absl::StrSplit(MetricsCsvHeader(), ',');
  EXPECT_EQ(header.back(), "val_loss");
  const std::vector<std::string> row0 =
      absl::StrSplit(FormatMetricsRow(recs[0], MetricsFormat::kCsv), ',');
  const std::vector<std::string> row1 =
      absl::StrSplit(FormatMetricsRow(recs[1], MetricsFormat::kCsv), ',');
  ASSERT_EQ(row0.size(), header.size());
  EXPECT_EQ(row0.back(), "");
  EXPECT_EQ(row1.back(), "4.250000");
  EXPECT_NE(FormatMetricsRow(recs[0], MetricsFormat::kJsonl).find("\"val_loss\":null"),
            std::string::npos);
  EXPECT_NE(FormatMetricsRow(recs[1], MetricsFormat::kJsonl).find("\"val_loss\":4.25"),
            std::string::npos);

  const std::string svg = RenderLossSvg(recs, "v");
  EXPECT_NE(svg.find("validation loss"), std::string::npos);
  const size_t a = svg.find("stroke=\"#e6550d\" stroke-width=\"2\" d=\"M");
  ASSERT_NE(a, std::string::npos) << svg;
  const std::string pts = svg.substr(a, svg.find("\"/>", a) - a);
  EXPECT_EQ(std::count(pts.begin(), pts.end(), 'L'), 1) << pts;  // two points
  EXPECT_EQ(RenderLossSvg(Records({5, 4}), "").find("validation loss"), std::string::npos);

  RunSummary s = Summarize(recs, 256, 1);
  EXPECT_EQ(s.val_evals, 2u);
  EXPECT_DOUBLE_EQ(s.first_val_loss, 4.25);
  EXPECT_DOUBLE_EQ(s.last_val_loss, 3.125);
  EXPECT_EQ(s.last_val_step, 3u);
  EXPECT_NE(FormatSummary(s, {}).find("val loss       4.2500 -> 3.1250"), std::string::npos)
      << FormatSummary(s, {});
  EXPECT_EQ(FormatSummary(Summarize(Records({1, 2}), 1, 1), {}).find("val loss"),
            std::string::npos);

  ProgressBar bar(stderr, 0, 4, 1, false);
  bar.Update(recs[1]);
  EXPECT_NE(bar.Line(recs[1]).find("val 4.2500"), std::string::npos) << bar.Line(recs[1]);
  EXPECT_NE(bar.Line(recs[2]).find("val 4.2500"), std::string::npos);  // kept
}

}  // namespace
}  // namespace zeroshard
