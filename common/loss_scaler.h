// LossScaler: the loss scale for FP16 training, with DeepSpeed's dynamic loss
// scaling semantics (deepspeed/runtime/fp16/loss_scaler.py,
// DynamicLossScaler), plus static and "none" (bf16/fp32) modes.
//
//   ASSIGN_OR_RETURN(LossScaler scaler, LossScaler::Create(LossScalerOptionsFor(cfg)));
//   for (each step) {
//     backward with loss * scaler.scale();
//     bool overflow = /* all-reduced: any non-finite gradient */;
//     ASSIGN_OR_RETURN(bool apply, scaler.Update(overflow));  // FAILED_PRECONDITION: stop
//     if (apply) optimizer step with coefficient 1 / scale_used (see grad_clip.h);
//   }
//
// Dynamic mode, precisely. State: scale (initially 2^initial_scale_power),
// hysteresis_left (initially `hysteresis`), iteration i (0-based, counts
// every Update), last_overflow_iteration (initially -1). Update(overflow) at
// iteration i:
//   overflow:  the step is skipped. If hysteresis == 1 or hysteresis_left == 1:
//              scale = max(scale / 2, min_loss_scale) (backoff); otherwise
//              hysteresis_left -= 1 and the scale is unchanged. Note that
//              hysteresis_left is NOT restored by a backoff, so once it has run
//              down every further overflow backs off until it is restored.
//              last_overflow_iteration = i.
//   clean:     the step is applied. If consecutive_hysteresis, hysteresis_left =
//              hysteresis. If (i - last_overflow_iteration) % loss_scale_window
//              == 0 (i.e. after every loss_scale_window consecutive clean
//              steps since the last overflow, or since the start):
//              scale *= 2 (not beyond FLT_MAX) and, when NOT
//              consecutive_hysteresis, hysteresis_left = hysteresis.
// With hysteresis == 1 this is exactly torch.cuda.amp.GradScaler's update
// (growth_factor 2, backoff_factor 0.5, growth_interval = loss_scale_window)
// apart from the min_loss_scale floor.
//
// Static mode (fp16.loss_scale > 0) and none mode (bf16/fp32, scale 1): the
// scale never changes; an overflowing step is still skipped.
//
// "Training cannot proceed": every mode counts consecutive overflowing steps
// that happen while the scale is already at its floor (min_loss_scale in
// dynamic mode; always, in static/none mode). When that count reaches
// max_overflows_at_min_scale, Update returns FAILED_PRECONDITION (the state
// records the step). A clean step resets the count.
//
// Deterministic: workers that feed the same overflow flags agree on the scale.
// Not thread-safe.
#ifndef ZEROSHARD_COMMON_LOSS_SCALER_H_
#define ZEROSHARD_COMMON_LOSS_SCALER_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace zeroshard {

enum class LossScaleMode { kNone = 0, kStatic = 1, kDynamic = 2 };

struct LossScalerOptions {
  LossScaleMode mode = LossScaleMode::kNone;
  double static_scale = 1;        // kStatic: > 0
  int initial_scale_power = 16;   // kDynamic: [0, 127]
  int loss_scale_window = 1000;   // >= 1
  int hysteresis = 2;             // >= 1
  double min_loss_scale = 1;      // > 0, <= initial scale
  bool consecutive_hysteresis = false;
  int max_overflows_at_min_scale = 10;  // >= 1
};

// kNone for bf16/fp32; for fp16 kStatic when fp16.loss_scale > 0, else
// kDynamic; the rest copied from cfg.fp16 and cfg.cluster.
LossScalerOptions LossScalerOptionsFor(const TrainingConfig& cfg);

// Everything Update changes; saved with checkpoints.
struct LossScalerState {
  double scale = 1;
  int hysteresis_left = 1;
  uint64_t iteration = 0;               // Updates so far
  int64_t last_overflow_iteration = -1;
  int overflows_at_min = 0;             // consecutive, at the floor
  uint64_t skipped_steps = 0;           // overflowing steps so far

  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

class LossScaler {
 public:
  // INVALID_ARGUMENT naming the option when one is out of range.
  static absl::StatusOr<LossScaler> Create(const LossScalerOptions& options);

  // The factor the loss is multiplied by before backward.
  double scale() const { return state_.scale; }

  // Records one step's (globally agreed) overflow flag. Returns true when the
  // optimizer step is to be applied, false when it is skipped; or
  // FAILED_PRECONDITION when training cannot proceed (see the overview).
  absl::StatusOr<bool> Update(bool overflow);

  const LossScalerState& state() const { return state_; }
  const LossScalerOptions& options() const { return options_; }

  // Resumes from a saved state (INVALID_ARGUMENT when it is inconsistent
  // with the options: non-finite or non-positive scale, a dynamic scale below
  // the floor, hysteresis_left outside [1, hysteresis], a static/none scale
  // that is not the configured one).
  absl::Status Restore(const LossScalerState& state);

 private:
  explicit LossScaler(const LossScalerOptions& options);
  bool AtFloor() const;

  LossScalerOptions options_;
  LossScalerState state_;
};

// The record worker rank 0 leaves in server 0's key-value store for a
// successor (docs/DESIGN.md, "Crash recovery"): the scaler's state at the
// start of `step`, written before the step before it is applied. Two slots
// (step % 2) hold the last two steps, so the record of either step the
// servers may stand at is there.
//   "step scale hysteresis_left iteration last_overflow_iteration
//    overflows_at_min skipped_steps" (the scale with %.17g: bit for bit)
std::string LossScalerKvKey(uint64_t step);
std::string LossScalerRecord(uint64_t step, const LossScalerState& state);
absl::StatusOr<std::pair<uint64_t, LossScalerState>> ParseLossScalerRecord(
    const std::string& text);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_LOSS_SCALER_H_
