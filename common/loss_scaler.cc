#include "common/loss_scaler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace zeroshard {

LossScalerOptions LossScalerOptionsFor(const TrainingConfig& cfg) {
  LossScalerOptions o;
  o.max_overflows_at_min_scale = cfg.cluster.max_overflows_at_min_scale;
  if (cfg.precision != Precision::kFp16) return o;  // kNone
  const Fp16Config& f = cfg.fp16;
  o.mode = f.loss_scale > 0 ? LossScaleMode::kStatic : LossScaleMode::kDynamic;
  o.static_scale = f.loss_scale > 0 ? f.loss_scale : 1;
  o.initial_scale_power = f.initial_scale_power;
  o.loss_scale_window = f.loss_scale_window;
  o.hysteresis = f.hysteresis;
  o.min_loss_scale = f.min_loss_scale;
  o.consecutive_hysteresis = f.consecutive_hysteresis;
  return o;
}

absl::StatusOr<LossScaler> LossScaler::Create(const LossScalerOptions& o) {
  auto bad = [](const char* what, double v, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat("loss scaler: ", what, " = ", v, ": ", want));
  };
  if (o.mode != LossScaleMode::kNone && o.mode != LossScaleMode::kStatic &&
      o.mode != LossScaleMode::kDynamic) {
    return absl::InvalidArgumentError("loss scaler: unknown mode");
  }
  if (o.max_overflows_at_min_scale < 1) {
    return bad("max_overflows_at_min_scale", o.max_overflows_at_min_scale, "must be >= 1");
  }
  if (o.mode == LossScaleMode::kStatic &&
      !(o.static_scale > 0 && o.static_scale <= FLT_MAX)) {
    return bad("loss_scale", o.static_scale, "must be in (0, FLT_MAX]");
  }
  if (o.mode == LossScaleMode::kDynamic) {
    if (o.initial_scale_power < 0 || o.initial_scale_power > 127) {
      return bad("initial_scale_power", o.initial_scale_power, "must be in [0, 127]");
    }
    if (o.loss_scale_window < 1) return bad("loss_scale_window", o.loss_scale_window, "must be >= 1");
    if (o.hysteresis < 1) return bad("hysteresis", o.hysteresis, "must be >= 1");
    if (!(o.min_loss_scale > 0) || o.min_loss_scale > std::ldexp(1.0, o.initial_scale_power)) {
      return bad("min_loss_scale", o.min_loss_scale, "must be in (0, 2^initial_scale_power]");
    }
  }
  return LossScaler(o);
}

LossScaler::LossScaler(const LossScalerOptions& o) : options_(o) {
  switch (o.mode) {
    case LossScaleMode::kNone: state_.scale = 1; break;
    case LossScaleMode::kStatic: state_.scale = o.static_scale; break;
    case LossScaleMode::kDynamic: state_.scale = std::ldexp(1.0, o.initial_scale_power); break;
  }
  state_.hysteresis_left = o.mode == LossScaleMode::kDynamic ? o.hysteresis : 1;
}

bool LossScaler::AtFloor() const {
  return options_.mode != LossScaleMode::kDynamic || state_.scale <= options_.min_loss_scale;
}

absl::StatusOr<bool> LossScaler::Update(bool overflow) {
  const int64_t i = static_cast<int64_t>(state_.iteration);
  ++state_.iteration;
  if (!overflow) {
    state_.overflows_at_min = 0;
    if (options_.mode == LossScaleMode::kDynamic) {
      if (options_.consecutive_hysteresis) state_.hysteresis_left = options_.hysteresis;
      if ((i - state_.last_overflow_iteration) % options_.loss_scale_window == 0) {
        if (!options_.consecutive_hysteresis) state_.hysteresis_left = options_.hysteresis;
        if (state_.scale * 2 <= FLT_MAX) state_.scale *= 2;
      }
    }
    return true;
  }
  ++state_.skipped_steps;
  const bool at_floor = AtFloor();
  if (options_.mode == LossScaleMode::kDynamic) {
    if (options_.hysteresis == 1 || state_.hysteresis_left <= 1) {
      state_.scale = std::max(state_.scale * 0.5, options_.min_loss_scale);
    } else {
      --state_.hysteresis_left;
    }
    state_.last_overflow_iteration = i;
  }
  if (at_floor) {
    ++state_.overflows_at_min;
    if (state_.overflows_at_min >= options_.max_overflows_at_min_scale) {
      return absl::FailedPreconditionError(absl::StrCat(
          "training cannot proceed: gradients overflowed in ", state_.overflows_at_min,
          " consecutive steps with the loss scale at its minimum (", state_.scale,
          options_.mode == LossScaleMode::kDynamic ? ", min_loss_scale" : ", fixed",
          "); lower the learning rate, check the data, or train in bf16"));
    }
  } else {
    state_.overflows_at_min = 0;
  }
  return false;
}

absl::Status LossScaler::Restore(const LossScalerState& s) {
  if (!std::isfinite(s.scale) || !(s.scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("loss scaler state: bad scale ", s.scale));
  }
  if (options_.mode == LossScaleMode::kDynamic) {
    if (s.scale < options_.min_loss_scale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss scaler state: scale ", s.scale, " below min_loss_scale ", options_.min_loss_scale));
    }
    if (s.hysteresis_left < 1 || s.hysteresis_left > options_.hysteresis) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loss scaler state: hysteresis_left ", s.hysteresis_left, " outside [1, ",
          options_.hysteresis, "]"));
    }
  } else if (s.scale != state_.scale) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler state: scale ", s.scale, " differs from the fixed scale ", state_.scale));
  }
  if (s.last_overflow_iteration < -1 ||
      s.last_overflow_iteration >= static_cast<int64_t>(s.iteration) || s.overflows_at_min < 0) {
    return absl::InvalidArgumentError("loss scaler state: inconsistent iteration counters");
  }
  state_ = s;
  return absl::OkStatus();
}

std::string LossScalerKvKey(uint64_t step) {
  return absl::StrCat("zeroshard/loss_scaler/", step % 2);
}

std::string LossScalerRecord(uint64_t step, const LossScalerState& s) {
  return absl::StrFormat("%d %.17g %d %d %d %d %d", step, s.scale,
                         s.hysteresis_left, s.iteration,
                         s.last_overflow_iteration, s.overflows_at_min,
                         s.skipped_steps);
}

absl::StatusOr<std::pair<uint64_t, LossScalerState>> ParseLossScalerRecord(
    const std::string& text) {
  std::vector<std::string> f = absl::StrSplit(text, ' ', absl::SkipEmpty());
  std::pair<uint64_t, LossScalerState> out;
  LossScalerState& s = out.second;
  if (f.size() != 7 || !absl::SimpleAtoi(f[0], &out.first) ||
      !absl::SimpleAtod(f[1], &s.scale) ||
      !absl::SimpleAtoi(f[2], &s.hysteresis_left) ||
      !absl::SimpleAtoi(f[3], &s.iteration) ||
      !absl::SimpleAtoi(f[4], &s.last_overflow_iteration) ||
      !absl::SimpleAtoi(f[5], &s.overflows_at_min) ||
      !absl::SimpleAtoi(f[6], &s.skipped_steps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler record \"", text, "\" does not parse"));
  }
  return out;
}

}  // namespace zeroshard
