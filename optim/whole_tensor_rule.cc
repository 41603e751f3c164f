// The updates of the registered rules for whole tensors, by name
// (optim/whole_tensor_rule.h).
#include "optim/whole_tensor_rule.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zeroshard {

// Each in its own file of optim/.
const WholeTensorRule& MuonTensorRule();       // optim/muon.cc
const WholeTensorRule& AdafactorTensorRule();  // optim/adafactor.cc

absl::StatusOr<const WholeTensorRule*> WholeTensorRuleFor(absl::string_view name) {
  static const std::vector<const WholeTensorRule*>* const kRules =
      new std::vector<const WholeTensorRule*>{&MuonTensorRule(), &AdafactorTensorRule()};
  std::string names;
  for (const WholeTensorRule* r : *kRules) {
    if (r->name() == name) return r;
    absl::StrAppend(&names, names.empty() ? "" : ", ", r->name());
  }
  return absl::NotFoundError(absl::StrCat("rule for whole tensors \"", name,
                                          "\" has no update in this build; it has: ",
                                          names));
}

float* TensorStateOf(const TensorRule& rule, absl::string_view slot_name,
                     const TensorPlan& plan, const TensorArrays& arrays) {
  const RuleInfo* info = FindTensorRule(rule.name);
  if (info == nullptr) return nullptr;
  for (const TensorSlot& s : info->tensor_state) {
    if (s.name != slot_name) continue;
    const TensorSlotPlace place = PlaceTensorSlot(s, rule, plan.shape);
    if (place.count == 0) continue;  // another form of it may apply
    float* base = arrays.slots[static_cast<size_t>(place.slot)];
    return base != nullptr ? base + place.offset : nullptr;
  }
  return nullptr;
}

absl::Status CheckTensorStateFits(const TensorRule& rule,
                                  const std::vector<int64_t>& shape, size_t slots) {
  const RuleInfo* info = FindTensorRule(rule.name);
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no rule \"", rule.name, "\""));
  }
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  for (const TensorSlot& s : info->tensor_state) {
    const TensorSlotPlace place = PlaceTensorSlot(s, rule, shape);
    if (place.count == 0) continue;
    if (static_cast<size_t>(place.slot) >= slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keeps its state in the element-wise rule's FP32 slots: it needs ",
          info->SlotsNeeded(), ", the optimizer's rule has ", slots,
          " (choose optimizer.type AdamW or Adam)"));
    }
    if (place.offset + place.count > numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keeps its ", s.name, " in slot ", place.slot, ": ", place.count,
          " values from ", place.offset, " do not fit its ", numel,
          " elements; give it to a group without ", info->types.front()));
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
