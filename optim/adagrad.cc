// torch.optim.Adagrad on the servers (DeepSpeed's CPU Adagrad), the
// registered rule "adagrad" (common/optimizer_rules.h: its params and its
// one slot, sum), through optim/elementwise_rule.h. Per element, as torch
// 1.13's single-tensor Adagrad computes it for FP32 tensors, with its
// Python scalars rounded to float and fma a fused multiply-add (torch's
// addcmul):
//   g = g * coefficient
//   weight_decay != 0:  g = fma(p, weight_decay, g)
//   sum = fma(g, g, sum)         (on the first step sum starts at
//                                 initial_accumulator_value)
//   p = p + (-clr * g) / (sqrt(sum) + eps)
// with clr = lr / (1 + (t - 1) * lr_decay) in double, t the Adam step
// (torch's per-parameter step, which starts with the run).
#include "optim/elementwise_rule.h"

namespace zeroshard {
namespace {

struct Adagrad {
  static constexpr char kName[] = "adagrad";
  // AdamStep::rule: -clr, eps, the accumulator's first value, a flag.
  enum { kNegClr, kEps, kInitial, kHasDecay };

  static AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                           float coefficient, double weight_decay,
                           double lr_scale) {
    const RuleInfo& info = *FindRule(kName);
    const uint64_t step = t < 1 ? 1 : t;
    const double lr = LearningRateAt(config, step) * lr_scale;
    const double lr_decay = RuleParamValue(config, *info.FindParam("lr_decay"));
    const double clr = lr / (1 + static_cast<double>(step - 1) * lr_decay);
    AdamStep s;
    s.kind = OptimizerKind::kRule;
    s.t = t;
    s.coefficient = coefficient;
    s.lr = static_cast<float>(lr);
    s.weight_decay = static_cast<float>(weight_decay);
    s.eps = static_cast<float>(config.eps);
    s.rule[kNegClr] = static_cast<float>(-clr);
    s.rule[kEps] = static_cast<float>(config.eps);
    s.rule[kInitial] = static_cast<float>(
        RuleParamValue(config, *info.FindParam("initial_accumulator_value")));
    s.rule[kHasDecay] = weight_decay != 0;
    return s;
  }

  ZS_RULE_ELEMENT void Element(const AdamStep& s, F g, F& p, F* state) {
    g = g * Splat<F>(s.coefficient);
    if (s.rule[kHasDecay] != 0) g = Fma(p, Splat<F>(s.weight_decay), g);
    const F sum = Fma(g, g, s.t <= 1 ? Splat<F>(s.rule[kInitial]) : state[0]);
    state[0] = sum;
    p = p + (Splat<F>(s.rule[kNegClr]) * g) / (Sqrt(sum) + Splat<F>(s.rule[kEps]));
  }
};

}  // namespace

const UpdateRule& AdagradRule() { return ElementwiseRuleOf<Adagrad>(); }

}  // namespace zeroshard
