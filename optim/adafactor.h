// Adafactor (Shazeer & Stern 2018, "Adafactor: Adaptive Learning Rates with
// Sublinear Memory Cost") for one tensor, with the defaults and the order of
// operations of Hugging Face's `Adafactor` (transformers.optimization):
//   t += 1;  rms_p = RMS(p)
//   lr = relative_step ? min(warmup_init ? 1e-6 t : 1e-2, 1 / sqrt(t)) : lr
//   lr *= scale_parameter ? max(eps2, rms_p) : 1
//   beta2t = 1 - t^decay_rate                          (decay_rate -0.8)
//   u = g^2 + eps1
//   2-D (factored):  r = beta2t r + (1 - beta2t) mean_cols(u)   (rows)
//                    c = beta2t c + (1 - beta2t) mean_rows(u)   (cols)
//                    u = rsqrt(r / mean(r)) rsqrt(c) g      (outer product)
//   otherwise:       v = beta2t v + (1 - beta2t) u;  u = rsqrt(v) g
//   u /= max(1, RMS(u) / clip_threshold);  u *= lr
//   beta1 given:     m = beta1 m + (1 - beta1) u;  u = m
//   p += p * (-weight_decay * lr);  p -= u
// A matrix's row and column statistics need the whole matrix on one server
// (docs/DESIGN.md, "Whole tensors"). State: r (rows) and c (cols) floats
// for a matrix, v (n) otherwise, and m (n) when beta1 is set. The
// reductions (means, RMS) sum in double here and in FP32 in torch, in
// another order, so the two agree within 1e-5 of the update and 4e-6 of the
// state, relative, not bit for bit (tests/optim/adafactor_test.cc).
//
//   AdafactorOptions o;   // optim/adafactor_options.h: Hugging Face's defaults
//   RETURN_IF_ERROR(ValidateAdafactorOptions(o));
//   RETURN_IF_ERROR(AdafactorUpdate(o, t, coefficient, GradView::Fp32(g),
//                                   {.rows = R, .cols = C}, state));
#ifndef ZEROSHARD_OPTIM_ADAFACTOR_H_
#define ZEROSHARD_OPTIM_ADAFACTOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "optim/adafactor_options.h"
#include "optim/optimizer.h"

namespace zeroshard {

// A tensor of batch x rows x cols elements (cols = 0: a vector of `rows`).
// A matrix (cols > 0) is factored, a 1 x C one too: Hugging Face factors
// every tensor of rank >= 2 over its last two dimensions, keeping the
// others: a weight of more dimensions is `batch` (the product of all but
// its last two) matrices of rows x cols, each with its own row and column
// statistics, as Hugging Face's exp_avg_sq_row (shape[:-1]) and
// exp_avg_sq_col (shape[:-2] + shape[-1:]) hold them.
struct AdafactorShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t batch = 1;
};

struct AdafactorState {
  float* master = nullptr;
  float* row = nullptr;      // factored: batch x rows
  float* col = nullptr;      // factored: batch x cols
  float* exp_avg_sq = nullptr;  // not factored: n
  float* exp_avg = nullptr;  // beta1 >= 0: n
  uint16_t* mirror = nullptr;  // may be null
};

// `o` at a point of the run's schedule: without relative_step, its lr
// times `scale` (lr_t / lr), kept above 0 so that a schedule that reaches 0
// still updates the state (the weights then do not move, as in torch).
AdafactorOptions AdafactorOnSchedule(AdafactorOptions o, double scale);

// Step t >= 1 (the state holds the effect of steps 1 .. t-1; zeros before
// the first). INVALID_ARGUMENT, changing nothing, for t = 0, a bad shape,
// invalid options or a missing array.
absl::Status AdafactorUpdate(const AdafactorOptions& o, uint64_t t,
                             float coefficient, GradView grad,
                             AdafactorShape shape, const AdafactorState& s);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_ADAFACTOR_H_
