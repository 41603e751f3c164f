// The PyTorch front-end's rank (python/zeroshard): the bytes it holds of the
// model's parameters and gradients under each stage, from the sizes of its
// units (the flat layout's, padded) — what `zeroshard-ctl estimate
// --torch_units=...` prints and tests/python/test_zero3_access.py checks
// against a rank's measured peak. Pure arithmetic.
//
//   ASSIGN_OR_RETURN(ProcessEstimate r,
//                    EstimateTorchRank({832, 320, 128}, /*workers=*/1,
//                                      /*stage=*/3, Precision::kFp32));
//   r.model_state_bytes();
//
// The terms (docs/PYTORCH.md "Memory"), with Ψ the units' sum and e the
// compute dtype's bytes (4 FP32, 2 BF16 / FP16):
// - stages 1 and 2: the flat parameters and the flat gradient, eΨ each;
// - stage 3, one rank: the flat gradient eΨ, and two units gathered at once
//   (the running one and the next, prefetched): e(U1 + U2), the two largest
//   units (one, when there is one);
// - stage 3, N ranks: the rank's FP32 gradient partition 4Ψ/N, two units
//   gathered e(U1 + U2), and one unit's FP32 gradient sum 4U1
//   (reduce-scattered as soon as the unit's gradients are in).
// INVALID_ARGUMENT for no unit, a unit of 0 elements, N < 1 or a stage not
// 1..3.
#ifndef ZEROSHARD_MODEL_TORCH_RANK_ESTIMATE_H_
#define ZEROSHARD_MODEL_TORCH_RANK_ESTIMATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "model/memory_estimate.h"

namespace zeroshard {

absl::StatusOr<ProcessEstimate> EstimateTorchRank(
    const std::vector<uint64_t>& unit_elems, int workers, int stage,
    Precision precision);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_TORCH_RANK_ESTIMATE_H_
