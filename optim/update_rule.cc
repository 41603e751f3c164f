#include "optim/update_rule.h"

#include "absl/strings/str_cat.h"
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
  void Update(const AdamStep& step, GradView grad,
              const StateSlice& slice) const override {
    AdamUpdate(step, grad, AdamSliceOf(slice));
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
  void Update(const AdamStep& step, GradView grad,
              const StateSlice& slice) const override {
    LionUpdate(step, grad,
               {.master = slice.master, .exp_avg = slice.slots[0],
                .mirror = slice.mirror, .n = slice.n});
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

}  // namespace

int UpdateRule::SlotIndex(absl::string_view name) const {
  const absl::Span<const StateSlot> s = slots();
  for (size_t i = 0; i < s.size(); ++i) {
    if (name == s[i].name) return static_cast<int>(i);
  }
  return -1;
}

size_t UpdateRule::StateBytesPerElement() const {
  size_t bytes = 0;
  for (const StateSlot& s : slots()) bytes += DTypeSize(s.dtype);
  return bytes;
}

const UpdateRule& UpdateRuleFor(OptimizerKind kind) {
  static const AdamRule* const adam = new AdamRule();
  static const LionRule* const lion = new LionRule();
  switch (kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      return *adam;
    case OptimizerKind::kLion:
      return *lion;
  }
  return *adam;
}

}  // namespace zeroshard
