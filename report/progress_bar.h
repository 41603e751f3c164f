// The progress display of zeroshard-train on stderr: on a terminal one line
// redrawn in place (\r) after every step; otherwise (a log file, a pipe) a
// plain line every `every` steps and at the last step.
//
//   ProgressBar bar(stderr, /*first_step=*/0, /*total_steps=*/300,
//                   /*every=*/10, isatty(2));
//   bar.Update(record);        // per step
//   bar.Finish();              // ends the in-place line
//
// Line: "[#####-----] 120/300  loss 3.2140  21.3k tok/s  scale 1  ETA 1m12s".
// ETA = remaining steps times the mean duration of the last (up to) 20
// steps. Not thread-safe.
#ifndef ZEROSHARD_REPORT_PROGRESS_BAR_H_
#define ZEROSHARD_REPORT_PROGRESS_BAR_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <string>

#include "common/progress_event.h"

namespace zeroshard {

class ProgressBar {
 public:
  ProgressBar(std::FILE* out, uint64_t first_step, uint64_t total_steps,
              int every, bool tty);

  void Update(const StepRecord& r);
  // Clears the in-place line (tty) so that other messages start clean.
  void Finish();

  // The text of one progress line (exposed for tests).
  std::string Line(const StepRecord& r) const;

 private:
  std::FILE* const out_;
  const uint64_t first_step_;
  const uint64_t total_steps_;
  const int every_;
  const bool tty_;
  std::deque<double> recent_seconds_;
  double last_val_loss_ = std::numeric_limits<double>::quiet_NaN();
  bool drawn_ = false;
};

// "1h02m", "3m05s", "12s".
std::string FormatEta(double seconds);

}  // namespace zeroshard

#endif  // ZEROSHARD_REPORT_PROGRESS_BAR_H_
