// Muon for one matrix (optim/muon.h).
#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "optim/whole_tensor_rule.h"

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

namespace {

// The registry's "muon" (common/optimizer_rules.h): a weight of two
// dimensions as it is, one of more flattened to (out, in * kh * kw) with
// its last two dimensions' shape scale; the momentum in its
// momentum_buffer.
class MuonWholeTensor final : public WholeTensorRule {
 public:
  absl::string_view name() const override { return "muon"; }

  absl::StatusOr<TensorPlan> Plan(const TensorRule&,
                                  const std::vector<int64_t>& shape) const override {
    const size_t d = shape.size();
    if (d < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "has ", d, " dimension; Muon updates matrices (a weight of more "
          "dimensions as (out, in * kh * kw), as its published code does)"));
    }
    TensorPlan plan{.shape = shape, .rows = shape[0], .cols = shape[1]};
    if (d > 2) {
      int64_t numel = 1;
      for (int64_t k : shape) numel *= k;
      plan.cols = numel / plan.rows;
      plan.aspect = static_cast<double>(shape[d - 2]) / shape[d - 1];
      if (plan.rows > (int64_t{1} << 20) || plan.cols > (int64_t{1} << 20)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "flattens to ", plan.rows, " x ", plan.cols,
            "; Muon takes at most 2^20 rows and columns"));
      }
    }
    return plan;
  }

  absl::Status Update(const TensorRule& rule, const TensorStep& step,
                      const TensorPlan& plan, GradView grad,
                      const TensorArrays& a) const override {
    thread_local NewtonSchulzScratch scratch;
    MuonStep s = MakeMuonStep(
        rule.Param("lr") * step.schedule_scale, rule.Param("momentum"),
        rule.Param("weight_decay"), rule.Param("nesterov") != 0, step.coefficient,
        rule.Param("ns_precision") == 1 ? NsPrecision::kBf16 : NsPrecision::kFp32);
    s.aspect = plan.aspect;
    return MuonUpdate(s, grad, plan.rows, plan.cols, a.master,
                      TensorStateOf(rule, "momentum_buffer", plan, a), a.mirror,
                      scratch);
  }
};

}  // namespace

const WholeTensorRule& MuonTensorRule() {
  static const MuonWholeTensor* const rule = new MuonWholeTensor();
  return *rule;
}

}  // namespace zeroshard
