// Muon for one matrix (optim/muon.h).
#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/dtype.h"

namespace zeroshard {
namespace {

// torch 1.13's lerp for a float weight.
float Lerp(float a, float b, float w) {
  return std::fabs(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

}  // namespace

MuonStep MakeMuonStep(double lr, double momentum, double weight_decay,
                      bool nesterov, float coefficient,
                      NsPrecision precision) {
  MuonStep s;
  s.precision = precision;
  s.lr = static_cast<float>(lr);
  s.momentum = static_cast<float>(momentum);
  s.nesterov = nesterov;
  s.coefficient = coefficient;
  s.one_minus_momentum = static_cast<float>(1.0 - momentum);
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.neg_lr = static_cast<float>(-lr);
  return s;
}

absl::Status MuonUpdate(const MuonStep& step, GradView grad, int64_t rows,
                        int64_t cols, float* master, float* momentum,
                        uint16_t* mirror, NewtonSchulzScratch& scratch,
                        bool reference) {
  if (master == nullptr || momentum == nullptr || grad.data == nullptr) {
    return absl::InvalidArgumentError(
        "Muon: master, momentum and gradient are required");
  }
  if (rows < 1 || cols < 1 || rows > (int64_t{1} << 20) ||
      cols > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        "Muon: a matrix needs both dimensions in 1 to 2^20");
  }
  const size_t n = static_cast<size_t>(rows * cols);
  thread_local std::vector<float> u;
  u.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float g = grad.At(i) * step.coefficient;
    const float m = Lerp(momentum[i], g, step.one_minus_momentum);
    momentum[i] = m;
    u[i] = step.nesterov ? Lerp(g, m, step.momentum) : m;
  }
  absl::Status s =
      reference ? NewtonSchulz5Reference(u.data(), rows, cols, u.data(),
                                         step.precision)
                : NewtonSchulz5(u.data(), rows, cols, u.data(), scratch,
                                step.precision);
  if (!s.ok()) return s;  // unreachable: the shape was checked above
  const double aspect =
      step.aspect > 0 ? step.aspect : static_cast<double>(rows) / cols;
  const float scale = static_cast<float>(std::sqrt(std::max(1.0, aspect)));
  // BF16: u is a BF16 tensor, so `u * scale` is rounded to BF16.
  const bool bf16 = step.precision == NsPrecision::kBf16;
  for (size_t i = 0; i < n; ++i) {
    const float p = master[i] * step.decay;
    const float scaled = u[i] * scale;
    master[i] = p + step.neg_lr *
                        (bf16 ? Bf16ToFloat(FloatToBf16(scaled)) : scaled);
  }
  if (mirror != nullptr) FloatToBf16Array(master, mirror, n);
  return absl::OkStatus();
}

}  // namespace zeroshard
