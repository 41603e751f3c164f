#include "optim/update_rule.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/optimizer_rules.h"
#include "common/status_macros.h"
#include "optim/adam8bit.h"
#include "optim/lion.h"
#if ZS_HAVE_CUDA_OPTIM
#include "optim/adam_device.h"
#endif

namespace zeroshard {
namespace {

AdamSlice AdamSliceOf(const StateSlice& s) {
  return {.master = s.master,
          .exp_avg = s.slots[0],
          .exp_avg_sq = s.slots[1],
          .mirror = s.mirror,
          .n = s.n};
}

// Adam and AdamW (torch.optim semantics): slots m and v.
class AdamRule final : public UpdateRule {
 public:
  absl::string_view name() const override { return "adamw"; }
  absl::Span<const StateSlot> slots() const override {
    return OptimizerStateSlots(OptimizerKind::kAdamW);
  }
  AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                    float coefficient, double weight_decay,
                    double lr_scale) const override {
    return MakeAdamStep(config, t, coefficient, weight_decay, lr_scale);
  }
  absl::Status Update(const AdamStep& step, GradView grad,
                      const StateSlice& slice) const override {
    AdamUpdate(step, grad, AdamSliceOf(slice));
    return absl::OkStatus();
  }
  absl::Status UpdateOnDevice(const AdamStep& step, GradView grad,
                              const StateSlice& slice,
                              void* cuda_stream) const override {
#if ZS_HAVE_CUDA_OPTIM
    return AdamUpdateDevice(step, grad, AdamSliceOf(slice),
                            static_cast<cudaStream_t>(cuda_stream));
#else
    (void)step, (void)grad, (void)slice, (void)cuda_stream;
    return absl::UnimplementedError(
        "this build has no device AdamW (built without CUDA)");
#endif
  }
  bool HasDeviceUpdate() const override {
#if ZS_HAVE_CUDA_OPTIM
    return true;
#else
    return false;
#endif
  }
  absl::string_view KernelName() const override { return AdamKernelName(); }
};

// Lion (optim/lion.h): slot exp_avg. No device kernel yet.
class LionRule final : public UpdateRule {
 public:
  absl::string_view name() const override { return "lion"; }
  absl::Span<const StateSlot> slots() const override {
    return OptimizerStateSlots(OptimizerKind::kLion);
  }
  AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                    float coefficient, double weight_decay,
                    double lr_scale) const override {
    return MakeLionStep(config, t, coefficient, weight_decay, lr_scale);
  }
  absl::Status Update(const AdamStep& step, GradView grad,
                      const StateSlice& slice) const override {
    LionUpdate(step, grad,
               {.master = slice.master, .exp_avg = slice.slots[0],
                .mirror = slice.mirror, .n = slice.n});
    return absl::OkStatus();
  }
  absl::Status UpdateOnDevice(const AdamStep& step, GradView grad,
                              const StateSlice& slice,
                              void* cuda_stream) const override {
    (void)step, (void)grad, (void)slice, (void)cuda_stream;
    return absl::UnimplementedError(
        "the Lion rule has no device kernel: use placement host or pinned");
  }
  bool HasDeviceUpdate() const override { return false; }
  absl::string_view KernelName() const override { return LionKernelName(); }
};

// AdamW8bit and Adam8bit (optim/adam8bit.h): m and v in 8 bits. Host only.
class Adam8bitRule final : public UpdateRule {
 public:
  absl::string_view name() const override { return "adamw8bit"; }
  absl::Span<const StateSlot> slots() const override {
    return OptimizerStateSlots(OptimizerKind::kAdamW8bit);
  }
  AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                    float coefficient, double weight_decay,
                    double lr_scale) const override {
    return MakeAdamStep(config, t, coefficient, weight_decay, lr_scale);
  }
  absl::Status Update(const AdamStep& step, GradView grad,
                      const StateSlice& slice) const override {
    const RulePart part{step, grad, 0, slice.n};
    return UpdateParts({&part, slice.n == 0 ? 0u : 1u}, slice);
  }
  absl::Status UpdateParts(absl::Span<const RulePart> parts,
                           const StateSlice& slice) const override {
    thread_local std::vector<Adam8bitPart> mine;
    mine.clear();
    for (const RulePart& p : parts) {
      mine.push_back({p.step, p.grad, p.offset, p.n});
    }
    return Adam8bitUpdateParts(
        mine, {.master = slice.master,
               .exp_avg = slice.codes[0],
               .exp_avg_absmax = slice.absmax[0],
               .exp_avg_sq = slice.codes[1],
               .exp_avg_sq_absmax = slice.absmax[1],
               .mirror = slice.mirror,
               .n = slice.n,
               .block = kQuant8Block});
  }
  absl::Status UpdateOnDevice(const AdamStep& step, GradView grad,
                              const StateSlice& slice,
                              void* cuda_stream) const override {
    (void)step, (void)grad, (void)slice, (void)cuda_stream;
    return absl::UnimplementedError(
        "the 8-bit Adam rule has no device kernel: use placement host or "
        "pinned");
  }
  bool HasDeviceUpdate() const override { return false; }
  absl::string_view KernelName() const override { return AdamKernelName(); }
};

}  // namespace

absl::Status UpdateRule::UpdateParts(absl::Span<const RulePart> parts,
                                     const StateSlice& slice) const {
  for (const RulePart& p : parts) {
    if (p.offset > slice.n || p.n > slice.n - p.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "update part [", p.offset, ", ", p.offset + p.n,
          ") is outside the slice of ", slice.n, " elements"));
    }
    StateSlice part = slice;
    part.master += p.offset;
    for (size_t k = 0; k < slots().size(); ++k) part.slots[k] += p.offset;
    if (part.mirror != nullptr) part.mirror += p.offset;
    part.n = p.n;
    RETURN_IF_ERROR(Update(p.step, p.grad, part));
  }
  return absl::OkStatus();
}

bool UpdateRule::quantized() const {
  for (const StateSlot& s : slots()) {
    if (s.format != SlotFormat::kFp32) return true;
  }
  return false;
}

int UpdateRule::SlotIndex(absl::string_view name) const {
  const absl::Span<const StateSlot> s = slots();
  for (size_t i = 0; i < s.size(); ++i) {
    if (name == s[i].name) return static_cast<int>(i);
  }
  return -1;
}

double UpdateRule::StateBytesPerElement() const {
  double bytes = 0;
  for (const StateSlot& s : slots()) bytes += SlotBytesPerElement(s.format);
  return bytes;
}

// The updates of the registered rules (common/optimizer_rules.h), by name:
// the five with a kind here, each added since in its own file of optim/.
const UpdateRule& SgdRule();      // optim/sgd.cc
const UpdateRule& AdagradRule();  // optim/adagrad.cc

namespace {

const UpdateRule* RuleNamed(absl::string_view name) {
  static const AdamRule* const adam = new AdamRule();
  static const Adam8bitRule* const adam8bit = new Adam8bitRule();
  static const std::vector<std::pair<absl::string_view, const UpdateRule*>>*
      const kRules = new std::vector<std::pair<absl::string_view, const UpdateRule*>>{
          {"adamw", adam},
          {"adam", adam},
          {"lion", new LionRule()},
          {"adamw8bit", adam8bit},
          {"adam8bit", adam8bit},
          {"sgd", &SgdRule()},
          {"adagrad", &AdagradRule()},
      };
  for (const auto& [n, rule] : *kRules) {
    if (n == name) return rule;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<const UpdateRule*> UpdateRuleFor(const OptimizerConfig& config) {
  const RuleInfo* info = RuleOf(config);
  const UpdateRule* rule = info != nullptr ? RuleNamed(info->name) : nullptr;
  if (rule != nullptr) return rule;
  std::string names;
  for (const RuleInfo& r : RegisteredRules()) {
    if (r.kind == OptimizerKind::kRule && RuleNamed(r.name) != nullptr) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", r.name);
    }
  }
  return absl::NotFoundError(absl::StrCat("optimizer rule \"", config.rule,
                                          "\" has no update in this build; "
                                          "it has: ", names));
}

const UpdateRule& UpdateRuleFor(OptimizerKind kind) {
  // Every kind but kRule has an entry and an update (tests check).
  const UpdateRule* rule = RuleNamed(RuleOfKind(kind).name);
  return rule != nullptr ? *rule : *RuleNamed("adamw");
}

}  // namespace zeroshard
