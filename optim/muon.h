// Muon (Keller Jordan 2024, "Muon: An optimizer for hidden layers in neural
// networks") for one 2-D matrix: momentum, Nesterov by default, the
// Newton–Schulz orthogonalization (optim/newton_schulz.h), the shape scale
// and decoupled weight decay, as the published muon_update and Muon.step
// compute it with torch (FP32 here):
//   g = g * coefficient
//   m = lerp(m, g, 1 - momentum)
//   u = nesterov ? lerp(g, m, momentum) : m
//   u = NewtonSchulz5(u) * sqrt(max(1, rows / cols))  (step.aspect if set)
//   p = p * (1 - lr * weight_decay);  p = p - lr * u
//   mirror = FloatToBf16(p)
// with torch's lerp: w < 0.5 ? a + w (b - a) : b - (b - a)(1 - w). One state
// slot, the momentum buffer (FP32). The whole matrix must be on hand: a
// rule that applies it keeps its tensors whole on one server
// (docs/DESIGN.md, "Whole tensors").
//
//   MuonStep step = MakeMuonStep(0.02, 0.95, 0.0, true, coefficient);
//   RETURN_IF_ERROR(MuonUpdate(step, GradView::Fp32(g), rows, cols, w, m,
//                              bf16, scratch));
#ifndef ZEROSHARD_OPTIM_MUON_H_
#define ZEROSHARD_OPTIM_MUON_H_

#include <cstdint>

#include "absl/status/status.h"
#include "optim/newton_schulz.h"
#include "optim/optimizer.h"

namespace zeroshard {

struct MuonStep {
  float lr = 0.02f;
  float momentum = 0.95f;
  bool nesterov = true;
  float coefficient = 1;
  float one_minus_momentum = 0.05f;  // float(1 - momentum)
  float decay = 1;                   // float(1 - lr * weight_decay)
  float neg_lr = -0.02f;
  // kBf16: the Newton–Schulz iteration in BF16, as the published code runs
  // it on the GPU, and its result scaled in BF16 (optim/newton_schulz.h).
  NsPrecision precision = NsPrecision::kFp32;
  // The shape scale's rows / cols: 0 for the matrix's own; for a weight of
  // more than two dimensions, flattened to (out, in * kh * kw) as the
  // published code views a convolution's kernel, its last two dimensions'
  // (kh / kw), which is what the published scale reads from the unflattened
  // gradient.
  double aspect = 0;
};

// The constants of one step, rounded to float as torch does for Python
// scalars (the products in double first).
MuonStep MakeMuonStep(double lr, double momentum, double weight_decay,
                      bool nesterov, float coefficient,
                      NsPrecision precision = NsPrecision::kFp32);

// One step on a rows x cols matrix (row-major, n = rows * cols elements per
// array; mirror may be null). `reference` runs the Newton–Schulz products
// with NewtonSchulz5Reference. INVALID_ARGUMENT, changing nothing, for a
// bad shape or a null array.
absl::Status MuonUpdate(const MuonStep& step, GradView grad, int64_t rows,
                        int64_t cols, float* master, float* momentum,
                        uint16_t* mirror, NewtonSchulzScratch& scratch,
                        bool reference = false);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_MUON_H_
