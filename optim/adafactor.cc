// Adafactor for one tensor (optim/adafactor.h).
#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "optim/whole_tensor_rule.h"

namespace zeroshard {
namespace {

// sqrt(sum x^2 / n), the sum in double, rounded to float.
float Rms(const float* x, size_t n) {
  double sq = 0;
  for (size_t i = 0; i < n; ++i) sq += double{x[i]} * x[i];
  return static_cast<float>(std::sqrt(sq) / std::sqrt(static_cast<double>(n)));
}

}  // namespace

AdafactorOptions AdafactorOnSchedule(AdafactorOptions o, double scale) {
  if (!o.relative_step) {
    o.lr = std::max(o.lr * scale, std::numeric_limits<double>::min());
  }
  return o;
}

absl::Status AdafactorUpdate(const AdafactorOptions& o, uint64_t t,
                             float coefficient, GradView grad,
                             AdafactorShape shape, const AdafactorState& s) {
  if (absl::Status v = ValidateAdafactorOptions(o); !v.ok()) return v;
  if (t == 0) return absl::InvalidArgumentError("Adafactor: step 0");
  const bool factored = shape.cols > 0;
  const int64_t rows = shape.rows, cols = factored ? shape.cols : 1;
  const int64_t batch = factored ? shape.batch : 1;
  if (rows < 1 || shape.cols < 0 || rows > (int64_t{1} << 31) ||
      cols > (int64_t{1} << 31) || batch < 1 ||
      batch > (int64_t{1} << 31) / rows / cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Adafactor: a tensor of ", shape.batch, " x ", shape.rows, " x ",
        shape.cols));
  }
  const bool first_moment = o.beta1 >= 0;
  if (s.master == nullptr || grad.data == nullptr ||
      (factored && (s.row == nullptr || s.col == nullptr)) ||
      (!factored && s.exp_avg_sq == nullptr) ||
      (first_moment && s.exp_avg == nullptr)) {
    return absl::InvalidArgumentError(
        "Adafactor: an array the tensor's state needs is missing");
  }
  const size_t n = static_cast<size_t>(batch * rows * cols);
  thread_local std::vector<float> g, u;
  g.resize(n);
  u.resize(n);
  absl::Cleanup free_large = [n] {
    if (n <= kKeptScratchElems) return;
    std::vector<float>().swap(g);
    std::vector<float>().swap(u);
  };
  for (size_t i = 0; i < n; ++i) g[i] = grad.At(i) * coefficient;
  const double td = static_cast<double>(t);
  double step = o.lr;
  if (o.relative_step) {
    step = std::min(o.warmup_init ? 1e-6 * td : 1e-2, 1.0 / std::sqrt(td));
  }
  if (o.scale_parameter) {
    step *= std::max(o.eps2, static_cast<double>(Rms(s.master, n)));
  }
  const float lr = static_cast<float>(step);
  const double beta2t_d = 1.0 - std::pow(td, o.decay_rate);
  const float beta2t = static_cast<float>(beta2t_d);
  const float one_minus = static_cast<float>(1.0 - beta2t_d);
  const float eps1 = static_cast<float>(o.eps1);
  for (size_t i = 0; i < n; ++i) u[i] = g[i] * g[i] + eps1;
  // Each of the batch's matrices with its own statistics.
  for (int64_t b = 0; factored && b < batch; ++b) {
    float* const ub = u.data() + b * rows * cols;
    const float* const gb = g.data() + b * rows * cols;
    float* const row = s.row + b * rows;
    float* const col = s.col + b * cols;
    double row_mean_sum = 0;
    for (int64_t i = 0; i < rows; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += ub[i * cols + j];
      const float mean = static_cast<float>(sum / cols);
      row[i] = row[i] * beta2t + one_minus * mean;
      row_mean_sum += row[i];
    }
    for (int64_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < rows; ++i) sum += ub[i * cols + j];
      const float mean = static_cast<float>(sum / rows);
      col[j] = col[j] * beta2t + one_minus * mean;
    }
    const float row_mean = static_cast<float>(row_mean_sum / rows);
    for (int64_t i = 0; i < rows; ++i) {
      const float rf = 1.0f / std::sqrt(row[i] / row_mean);
      for (int64_t j = 0; j < cols; ++j) {
        const float cf = 1.0f / std::sqrt(col[j]);
        ub[i * cols + j] = rf * cf * gb[i * cols + j];
      }
    }
  }
  if (!factored) {
    for (size_t i = 0; i < n; ++i) {
      s.exp_avg_sq[i] = s.exp_avg_sq[i] * beta2t + one_minus * u[i];
      u[i] = (1.0f / std::sqrt(s.exp_avg_sq[i])) * g[i];
    }
  }
  const float clip = std::max(
      Rms(u.data(), n) / static_cast<float>(o.clip_threshold), 1.0f);
  const float b1 = static_cast<float>(o.beta1);
  const float one_minus_b1 = static_cast<float>(1.0 - o.beta1);
  const float decay = static_cast<float>(-o.weight_decay * step);
  for (size_t i = 0; i < n; ++i) {
    float x = (u[i] / clip) * lr;
    if (first_moment) {
      s.exp_avg[i] = s.exp_avg[i] * b1 + one_minus_b1 * x;
      x = s.exp_avg[i];
    }
    float p = s.master[i];
    if (o.weight_decay != 0) p = p + decay * p;
    s.master[i] = p - x;
  }
  if (s.mirror != nullptr) FloatToBf16Array(s.master, s.mirror, n);
  return absl::OkStatus();
}

namespace {

// The registry's "adafactor" (common/optimizer_rules.h): a tensor of two or
// more dimensions factored over its last two (Hugging Face's), each slice
// alone; its state where the entry's tensor_state places it.
class AdafactorWholeTensor final : public WholeTensorRule {
 public:
  absl::string_view name() const override { return "adafactor"; }

  absl::StatusOr<TensorPlan> Plan(const TensorRule&,
                                  const std::vector<int64_t>& shape) const override {
    const size_t d = shape.size();
    if (d == 0) return absl::InvalidArgumentError("has no dimensions");
    TensorPlan plan{.shape = shape, .rows = shape[0]};
    if (d >= 2) {
      plan.rows = shape[d - 2];
      plan.cols = shape[d - 1];
      for (size_t k = 0; k + 2 < d; ++k) plan.batch *= shape[k];
    }
    return plan;
  }

  absl::Status Update(const TensorRule& rule, const TensorStep& step,
                      const TensorPlan& plan, GradView grad,
                      const TensorArrays& a) const override {
    const AdafactorOptions o =
        AdafactorOnSchedule(AdafactorOptionsOf(rule), step.schedule_scale);
    return AdafactorUpdate(
        o, step.t, step.coefficient, grad,
        {.rows = plan.rows, .cols = plan.cols, .batch = plan.batch},
        {.master = a.master,
         .row = TensorStateOf(rule, "exp_avg_sq_row", plan, a),
         .col = TensorStateOf(rule, "exp_avg_sq_col", plan, a),
         .exp_avg_sq = TensorStateOf(rule, "exp_avg_sq", plan, a),
         .exp_avg = TensorStateOf(rule, "exp_avg", plan, a),
         .mirror = a.mirror});
  }
};

}  // namespace

const WholeTensorRule& AdafactorTensorRule() {
  static const AdafactorWholeTensor* const rule = new AdafactorWholeTensor();
  return *rule;
}

}  // namespace zeroshard
