// torch.optim.SGD on the servers, the registered rule "sgd"
// (common/optimizer_rules.h: its params and its one slot,
// momentum_buffer), through optim/elementwise_rule.h. Per element, as torch
// 1.13's single-tensor SGD computes it for FP32 tensors, with its Python
// scalars rounded to float and fma a fused multiply-add (torch's add with
// alpha):
//   g = g * coefficient
//   weight_decay != 0:  g = fma(p, weight_decay, g)
//   momentum != 0:      buf = g on the first step, else
//                       buf = fma(g, 1 - dampening, buf * momentum)
//                       g = nesterov ? fma(buf, momentum, g) : buf
//   p = fma(g, -lr, p)
// "The first step" is Adam step t = 1 of the run, when torch's buffer is
// still None (a run resumed from a checkpoint goes on with its buffer).
#include "optim/elementwise_rule.h"

namespace zeroshard {
namespace {

struct Sgd {
  static constexpr char kName[] = "sgd";
  // AdamStep::rule: -lr, momentum, 1 - dampening, and three flags.
  enum { kNegLr, kMomentum, kOneMinusDampening, kNesterov, kHasMomentum, kHasDecay };

  static AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                           float coefficient, double weight_decay,
                           double lr_scale) {
    const RuleInfo& info = *FindRule(kName);
    const double momentum = RuleParamValue(config, *info.FindParam("momentum"));
    const double dampening = RuleParamValue(config, *info.FindParam("dampening"));
    const double lr = LearningRateAt(config, t < 1 ? 1 : t) * lr_scale;
    AdamStep s;
    s.kind = OptimizerKind::kRule;
    s.t = t;
    s.coefficient = coefficient;
    s.lr = static_cast<float>(lr);
    s.weight_decay = static_cast<float>(weight_decay);
    s.rule[kNegLr] = static_cast<float>(-lr);
    s.rule[kMomentum] = static_cast<float>(momentum);
    s.rule[kOneMinusDampening] = static_cast<float>(1 - dampening);
    s.rule[kNesterov] = RuleParamValue(config, *info.FindParam("nesterov")) != 0;
    s.rule[kHasMomentum] = momentum != 0;
    s.rule[kHasDecay] = weight_decay != 0;
    return s;
  }

  ZS_RULE_ELEMENT void Element(const AdamStep& s, F g, F& p, F* state) {
    g = g * Splat<F>(s.coefficient);
    if (s.rule[kHasDecay] != 0) g = Fma(p, Splat<F>(s.weight_decay), g);
    if (s.rule[kHasMomentum] != 0) {
      F& buf = state[0];
      buf = s.t <= 1 ? g
                     : Fma(g, Splat<F>(s.rule[kOneMinusDampening]),
                           buf * Splat<F>(s.rule[kMomentum]));
      g = s.rule[kNesterov] != 0 ? Fma(buf, Splat<F>(s.rule[kMomentum]), g) : buf;
    }
    p = Fma(g, Splat<F>(s.rule[kNegLr]), p);
  }
};

}  // namespace

const UpdateRule& SgdRule() { return ElementwiseRuleOf<Sgd>(); }

}  // namespace zeroshard
