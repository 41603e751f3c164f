// Per-step metrics file of a training run: CSV with a header row, or JSON
// Lines, one row per optimizer step, flushed after every row so that a run
// that fails part-way still leaves the steps it made.
//
//   ASSIGN_OR_RETURN(auto w, MetricsWriter::Open("out/metrics.csv",
//                                               MetricsFormat::kCsv));
//   RETURN_IF_ERROR(w->Append(record));
//
// Columns (both formats, in this order): step, loss, tokens_per_s,
// loss_scale, grad_norm, lr, skipped (true/false), seconds, fetch_s,
// compute_s, comm_wait_s, commit_s, model_state_bytes, activation_peak_bytes,
// val_loss (the validation loss after this step where one was computed:
// empty in CSV, null in JSON Lines, elsewhere).
#ifndef ZEROSHARD_REPORT_METRICS_WRITER_H_
#define ZEROSHARD_REPORT_METRICS_WRITER_H_

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/progress_event.h"
#include "common/config.h"

namespace zeroshard {

class MetricsWriter {
 public:
  // Creates (truncates) `path`; the CSV header is written at once.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(
      const std::string& path, MetricsFormat format);
  // A resumed run's file: the rows of `path` (an earlier run's, in
  // `format`) before step `first_step` are kept, the later ones (steps the
  // resumed run makes again) dropped, and new rows append. `kept` receives
  // the kept rows' step, loss and val_loss (for the loss plot). A missing
  // file is Open's; a file of another format or header is refused, naming
  // it, with nothing changed.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Continue(
      const std::string& path, MetricsFormat format, uint64_t first_step,
      std::vector<StepRecord>* kept);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  absl::Status Append(const StepRecord& r);
  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::FILE* f, std::string path, MetricsFormat format)
      : file_(f), path_(std::move(path)), format_(format) {}

  std::FILE* file_;
  const std::string path_;
  const MetricsFormat format_;
};

// One row in `format` without the newline (exposed for tests).
std::string FormatMetricsRow(const StepRecord& r, MetricsFormat format);
// The CSV header row without the newline.
std::string MetricsCsvHeader();

}  // namespace zeroshard

#endif  // ZEROSHARD_REPORT_METRICS_WRITER_H_
