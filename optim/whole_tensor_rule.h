// The seam of the rules for whole tensors on the servers (docs/DESIGN.md,
// "Rules for whole tensors"): a registry entry of scope kWholeTensor
// (common/optimizer_rules.h: its params and the state it keeps per tensor)
// has its update here, found by name. The server plans each tensor of a
// group with the rule at Init and applies the rule to it whole at each
// step; the in-process reference trainer (tests/support) does the same.
//
//   ASSIGN_OR_RETURN(const WholeTensorRule* u, WholeTensorRuleFor(rule.name));
//   ASSIGN_OR_RETURN(TensorPlan plan, u->Plan(rule, shape));
//   RETURN_IF_ERROR(u->Update(rule, {.t = t, .coefficient = c}, plan,
//                             GradView::Fp32(g), {.master = w, .slots = s}));
#ifndef ZEROSHARD_OPTIM_WHOLE_TENSOR_RULE_H_
#define ZEROSHARD_OPTIM_WHOLE_TENSOR_RULE_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/optimizer_rules.h"
#include "optim/optimizer.h"
#include "optim/update_rule.h"

namespace zeroshard {

// How a rule sees one tensor, fixed at Init: its shape, and the matrix the
// update works on (rows x cols, `batch` of them; cols 0 for a vector);
// aspect is Muon's shape scale of a flattened kernel (0: rows / cols).
struct TensorPlan {
  std::vector<int64_t> shape;
  int64_t rows = 0, cols = 0, batch = 1;
  double aspect = 0;
};

// One step's settings: step t >= 1, the gradient's coefficient (clipping,
// loss scale), and the schedule's lr_t / lr, which a rule's own lr follows.
struct TensorStep {
  uint64_t t = 1;
  float coefficient = 1;
  double schedule_scale = 1;
};

// A tensor's arrays: master weights, the element-wise rule's FP32 slots
// (the rule's state where its entry's tensor_state places it), mirror (may
// be null).
struct TensorArrays {
  float* master = nullptr;
  std::array<float*, kMaxStateSlots> slots{};
  uint16_t* mirror = nullptr;
};

class WholeTensorRule {
 public:
  virtual ~WholeTensorRule() = default;
  virtual absl::string_view name() const = 0;
  // The rule's view of a tensor of `shape`: INVALID_ARGUMENT (a sentence
  // that follows the tensor's name) for a rank or size it does not take.
  virtual absl::StatusOr<TensorPlan> Plan(const TensorRule& rule,
                                          const std::vector<int64_t>& shape) const = 0;
  // One step on a whole tensor. INVALID_ARGUMENT, changing nothing, for
  // bad options or a missing array.
  virtual absl::Status Update(const TensorRule& rule, const TensorStep& step,
                              const TensorPlan& plan, GradView grad,
                              const TensorArrays& arrays) const = 0;
};

// The update of the registered whole-tensor rule `name` (lives for the
// process); NOT_FOUND naming those this build has.
absl::StatusOr<const WholeTensorRule*> WholeTensorRuleFor(absl::string_view name);

// Where the state `slot_name` of `rule` lies for the tensor of `plan` in
// `arrays` (null when it does not apply to the tensor).
float* TensorStateOf(const TensorRule& rule, absl::string_view slot_name,
                     const TensorPlan& plan, const TensorArrays& arrays);

// INVALID_ARGUMENT naming the state unless every state slot of `rule` that
// applies to a tensor of `shape` (numel elements) fits its element slot and
// the element-wise rule has that slot (`slots` FP32 slots).
absl::Status CheckTensorStateFits(const TensorRule& rule,
                                  const std::vector<int64_t>& shape,
                                  size_t slots);

}  // namespace zeroshard

#endif  // ZEROSHARD_OPTIM_WHOLE_TENSOR_RULE_H_
