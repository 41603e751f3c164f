// The optimizer seam on the servers: an update rule declares the state it
// keeps per element (its slots, common/optimizer_config.h StateSlot) and
// applies one step to a slice of master weights, slots and BF16 mirror. The
// store, checkpoints, restore, snapshots and Inspect know a rule only
// through this interface (docs/DESIGN.md, "Optimizer rules").
//
//   const UpdateRule& rule = UpdateRuleFor(config.kind);
//   StateSlice s{.master = w, .mirror = bf16, .n = n};
//   s.slots[0] = m; s.slots[1] = v;           // rule.slots() order
//   RETURN_IF_ERROR(rule.Update(rule.MakeStep(config, t, coef, wd, 1.0),
//                               GradView::Fp32(g), s));
//
// AdamW and Adam share one rule (AdamStep::kind tells them apart); its host
// update is AdamUpdate (optim/optimizer.h: AVX-512 / AVX2 / reference, bit
// for bit) and its device update the device AdamW (optim/adam_device.h).
#ifndef ZEROSHARD_OPTIM_UPDATE_RULE_H_
#define ZEROSHARD_OPTIM_UPDATE_RULE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/optimizer_config.h"
#include "optim/optimizer.h"

namespace zeroshard {

// The most slots a rule may declare.
inline constexpr size_t kMaxStateSlots = 4;

// The arrays one update touches, n elements each; slots in the rule's
// order (only the first slots().size() are read). An FP32 slot k is
// slots[k]; an 8-bit one is codes[k] (n bytes) and absmax[k] (Q8Blocks(n)
// scales), its blocks counted from the slice's first element. mirror may
// be null.
struct StateSlice {
  float* master = nullptr;
  std::array<float*, kMaxStateSlots> slots{};
  std::array<uint8_t*, kMaxStateSlots> codes{};
  std::array<float*, kMaxStateSlots> absmax{};
  uint16_t* mirror = nullptr;
  size_t n = 0;
};

// A part of a slice with its own step: elements [offset, offset + n), the
// gradient at grad (n elements).
struct RulePart {
  AdamStep step;
  GradView grad;
  size_t offset = 0;
  size_t n = 0;
};

class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  // "adamw" (Adam and AdamW), "lion".
  virtual absl::string_view name() const = 0;
  // The state kept per element, beside master and mirror: at most
  // kMaxStateSlots, FP32 or 8-bit.
  virtual absl::Span<const StateSlot> slots() const = 0;
  // The per-step constants for step t >= 1 of one parameter group.
  virtual AdamStep MakeStep(const OptimizerConfig& config, uint64_t t,
                            float coefficient, double weight_decay,
                            double lr_scale) const = 0;
  // One step on host arrays. Preconditions as AdamUpdateReference. Always
  // OK for FP32 slots; an 8-bit rule refuses (changing nothing) an update
  // its state cannot hold.
  virtual absl::Status Update(const AdamStep& step, GradView grad,
                              const StateSlice& slice) const = 0;
  // Several steps at once on parts that tile `slice` (sorted, disjoint,
  // covering it). An element-wise FP32 rule applies each part alone (the
  // default); an 8-bit rule needs every part of a block in one call, since
  // the block's scale follows all of its elements (optim/adam8bit.h).
  virtual absl::Status UpdateParts(absl::Span<const RulePart> parts,
                                   const StateSlice& slice) const;
  // The same step by the rule's scalar reference, which tests compare
  // with Update (a rule whose Update is its reference: Update itself).
  virtual absl::Status UpdateReference(const AdamStep& step, GradView grad,
                                       const StateSlice& slice) const {
    return Update(step, grad, slice);
  }
  // One step on device arrays, the gradient already on the device, queued
  // on `cuda_stream` (a cudaStream_t). UNIMPLEMENTED where the rule has no
  // device kernel or the build has no CUDA.
  virtual absl::Status UpdateOnDevice(const AdamStep& step, GradView grad,
                                      const StateSlice& slice,
                                      void* cuda_stream) const = 0;
  // Whether UpdateOnDevice can run in this build (placement device needs
  // it; Init refuses the rule otherwise).
  virtual bool HasDeviceUpdate() const = 0;
  // The host kernel chosen on this CPU ("avx512", "avx2", "scalar").
  virtual absl::string_view KernelName() const = 0;

  // The index of slot `name`, or -1.
  int SlotIndex(absl::string_view name) const;
  // Sum of the slots' bytes per element (SlotBytesPerElement).
  double StateBytesPerElement() const;
  // Whether a slot is 8-bit: the store then keeps its owned range and
  // chunks in whole blocks and updates whole blocks at once.
  bool quantized() const;
};

// The rule of an optimizer kind (never null; lives for the process). Not
// for kRule, whose rule is found by name:
const UpdateRule& UpdateRuleFor(OptimizerKind kind);
// The rule of a config: its kind's, or a kRule config's registered rule
// by name (NOT_FOUND naming the registered ones when this build has no
// update for it).
absl::StatusOr<const UpdateRule*> UpdateRuleFor(const OptimizerConfig& config);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_UPDATE_RULE_H_
