// Adafactor's hyperparameters (optim/adafactor_options.h).
#include "optim/adafactor_options.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::Status ValidateAdafactorOptions(const AdafactorOptions& o,
                                      absl::string_view config_key) {
  auto bad = [&](const char* option, const char* why) {
    return absl::InvalidArgumentError(
        config_key.empty()
            ? absl::StrCat("Adafactor: option \"", option, "\" ", why)
            : absl::StrCat("config key \"", config_key, ".", option, "\": ",
                           why));
  };
  constexpr double kMax = 1e6;
  if (o.relative_step && o.lr != 0) {
    return bad("lr", "cannot be combined with relative_step (the step size "
                     "is then 1/sqrt(t)); set relative_step to false");
  }
  if (!o.relative_step && !(o.lr > 0 && o.lr <= kMax)) {
    return bad("lr", "must be a positive number (at most 1e6) without relative_step");
  }
  if (o.warmup_init && !o.relative_step) {
    return bad("warmup_init", "requires relative_step");
  }
  if (!(o.eps1 >= 0 && o.eps1 <= kMax) || !(o.eps2 >= 0 && o.eps2 <= kMax)) {
    return bad("eps", "must be two numbers in [0, 1e6]");
  }
  if (!(o.clip_threshold > 0 && o.clip_threshold <= kMax)) {
    return bad("clip_threshold", "must be a number in (0, 1e6]");
  }
  if (!(o.decay_rate < 0 && o.decay_rate >= -1)) {
    return bad("decay_rate", "must be in [-1, 0)");
  }
  if (o.beta1 >= 1 || std::isnan(o.beta1)) {
    return bad("beta1", "must be in [0, 1) (or absent: no first moment)");
  }
  if (!(o.weight_decay >= 0 && o.weight_decay <= kMax)) {
    return bad("weight_decay", "must be a number in [0, 1e6]");
  }
  return absl::OkStatus();
}

AdafactorOptions AdafactorOptionsOf(const TensorRule& r) {
  AdafactorOptions o;
  o.lr = r.Param("lr");
  o.eps1 = r.Param("eps[0]");
  o.eps2 = r.Param("eps[1]");
  o.clip_threshold = r.Param("clip_threshold");
  o.decay_rate = r.Param("decay_rate");
  o.beta1 = r.Param("beta1");
  o.weight_decay = r.Param("weight_decay");
  o.scale_parameter = r.Param("scale_parameter") != 0;
  o.relative_step = r.Param("relative_step") != 0;
  o.warmup_init = r.Param("warmup_init") != 0;
  return o;
}

}  // namespace zeroshard
