// The end-of-run summary of zeroshard-train: figures computed from the
// per-step records, and their rendering as a few human-readable lines.
//
//   RunSummary s = Summarize(records, tokens_per_step, wall_seconds);
//   std::fputs(FormatSummary(s, paths).c_str(), stderr);
//
// Contracts: works for any number of records (0 gives zeros); "first/last
// 10" use min(10, n) records; tokens/s is the median over steps (robust to
// the slow first step).
#ifndef ZEROSHARD_TOOLS_TRAIN_RUN_SUMMARY_H_
#define ZEROSHARD_TOOLS_TRAIN_RUN_SUMMARY_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/progress_event.h"

namespace zeroshard {

struct RunSummary {
  uint64_t steps = 0;          // records seen
  uint64_t first_step = 0;
  uint64_t last_step = 0;
  double first_loss = 0;
  double last_loss = 0;
  double first10_mean = 0;     // mean loss of the first min(10, n) steps
  double last10_mean = 0;      // mean loss of the last min(10, n) steps
  double median_tokens_per_s = 0;
  double wall_seconds = 0;
  uint64_t total_tokens = 0;
  uint64_t skipped_steps = 0;
  double final_loss_scale = 1;
  // Validation loss: the first and last evaluation (NaN when none).
  uint64_t val_evals = 0;
  uint64_t first_val_step = 0, last_val_step = 0;
  double first_val_loss = std::numeric_limits<double>::quiet_NaN();
  double last_val_loss = std::numeric_limits<double>::quiet_NaN();
  // Crash recovery: processes replaced, and why (one line each).
  std::vector<std::string> restarts;
};

RunSummary Summarize(const std::vector<StepRecord>& records,
                     uint64_t tokens_per_step, double wall_seconds);

// Where the run's outputs went (empty entries are left out).
struct RunOutputs {
  std::string metrics;
  std::string plot;
  std::string logs;
  std::string weights;
};

std::string FormatSummary(const RunSummary& s, const RunOutputs& outputs);

}  // namespace zeroshard

#endif  // ZEROSHARD_TOOLS_TRAIN_RUN_SUMMARY_H_
