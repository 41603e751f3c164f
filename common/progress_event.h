// The worker's progress feed, format and parse in one place: rank 0 of
// zeroshard-worker prints one JSON object per line on stdout
// ({"event":"start"|"step"|"done", ...}) with FormatWorkerEvent; the launcher
// (zeroshard-train) turns each line back into a typed WorkerEvent with
// ParseWorkerEvent.
//
//   std::printf("%s\n", FormatWorkerEvent(event).c_str());     // worker
//   ASSIGN_OR_RETURN(WorkerEvent e, ParseWorkerEvent(line));    // launcher
//   if (e.kind == WorkerEvent::Kind::kStep) records.push_back(e.record);
//
// Contracts of the parser:
// - A line that is not a JSON object, lacks "event", or has a "step" event
//   without the required fields (step, loss, tokens_per_s, loss_scale,
//   grad_norm, lr, skipped, seconds) is INVALID_ARGUMENT quoting the line.
// - An unknown event name parses as kOther (newer workers may add events).
// - Optional breakdown fields default to 0 when absent.
// - Non-finite numbers as printf writes them (inf, -inf, nan), which are not
//   JSON, are accepted (an overflowing FP16 step has grad_norm inf).
#ifndef ZEROSHARD_COMMON_PROGRESS_EVENT_H_
#define ZEROSHARD_COMMON_PROGRESS_EVENT_H_

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace zeroshard {

// One optimizer step as rank 0 reported it.
struct StepRecord {
  uint64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double loss_scale = 1;
  double grad_norm = 0;
  double lr = 0;
  bool skipped = false;
  double seconds = 0;
  // Rank 0's breakdown of `seconds` and its memory figures.
  double fetch_s = 0;
  double compute_s = 0;
  double comm_wait_s = 0;
  double commit_s = 0;
  uint64_t model_state_bytes = 0;
  uint64_t activation_peak_bytes = 0;
  // Validation loss of the model after this step (zeroshard.data
  // eval_every_steps); NaN when not evaluated at this step. Written only
  // when evaluated; absent reads as NaN.
  double val_loss = std::numeric_limits<double>::quiet_NaN();
};

struct WorkerEvent {
  enum class Kind { kStart, kStep, kDone, kOther };
  Kind kind = Kind::kOther;
  // kStart: the first step to run; kDone: the step reached.
  uint64_t step = 0;
  // kStart only.
  uint64_t total_steps = 0;
  uint64_t params = 0;
  uint64_t workers = 0;
  uint64_t servers = 0;
  // kStep only.
  StepRecord record;
};

// One line, without the newline. Non-finite loss and grad_norm are written
// as null (they read back as NaN). kOther writes {"event":"other"}.
std::string FormatWorkerEvent(const WorkerEvent& event);

absl::StatusOr<WorkerEvent> ParseWorkerEvent(std::string_view line);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_PROGRESS_EVENT_H_
