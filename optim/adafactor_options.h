// Adafactor's hyperparameters (Shazeer & Stern 2018), with the names and
// defaults of Hugging Face's `Adafactor` (transformers.optimization): the
// settings of the arithmetic in optim/adafactor.h, made from a parameter
// group's rule (common/optimizer_rules.h, entry "adafactor") by
// AdafactorOptionsOf.
//
//   AdafactorOptions o;                  // Hugging Face's defaults
//   o.relative_step = false;
//   o.lr = 1e-3;
//   RETURN_IF_ERROR(ValidateAdafactorOptions(o));
#ifndef ZEROSHARD_OPTIM_ADAFACTOR_OPTIONS_H_
#define ZEROSHARD_OPTIM_ADAFACTOR_OPTIONS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/optimizer_rules.h"

namespace zeroshard {

struct AdafactorOptions {
  double lr = 0;             // used (and required > 0) without relative_step
  double eps1 = 1e-30;       // added to g^2
  double eps2 = 1e-3;        // floor of the parameter scale
  double clip_threshold = 1.0;
  double decay_rate = -0.8;
  double beta1 = -1;         // < 0: no first moment (the default)
  double weight_decay = 0;
  bool scale_parameter = true;
  bool relative_step = true;
  bool warmup_init = false;
  bool first_moment() const { return beta1 >= 0; }
  friend bool operator==(const AdafactorOptions&,
                         const AdafactorOptions&) = default;
};

// INVALID_ARGUMENT naming the option for contradictions Hugging Face also
// refuses (a manual lr with relative_step, warmup_init without
// relative_step) and for values out of range: eps1, eps2 finite and >= 0,
// clip_threshold > 0, decay_rate in [-1, 0), beta1 below 1, weight_decay
// finite and >= 0; every value at most 1e6. The message names the option:
// `config key "<config_key>.lr": ...`, or `Adafactor: option "lr" ...`
// without a key.
absl::Status ValidateAdafactorOptions(const AdafactorOptions& o,
                                      absl::string_view config_key = "");

// The options of a rule "adafactor" (its params by Hugging Face's names;
// lr none: 0, beta1 none: -1).
AdafactorOptions AdafactorOptionsOf(const TensorRule& rule);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAFACTOR_OPTIONS_H_
