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
// Under stage 3 with `keep` (DeepSpeed's stage3_max_reuse_distance,
// stage3_param_persistence_threshold and stage3_max_live_parameters, which
// the front-end honours: python/zeroshard/stage3.py), the units gathered
// at once are the larger of e(U1 + U2) and the peak of a simulation of the
// rules on the trace of a model whose units run in layout order (forward
// 0..n-1, backward n-1..0): persistent units gathered together at their
// first use, a unit kept when the trace uses it again within the reuse
// distance while the kept units fit under the live limit, the next uses'
// units prefetched up to the prefetch bucket in flight, stopping at a unit
// gathered already. The default `keep` keeps nothing and prefetches one
// unit (two units).
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

// What stays gathered under stage 3 (see above); the defaults keep nothing.
struct TorchZero3Keep {
  uint64_t max_reuse_distance = 0;
  uint64_t persistence_threshold = 0;
  uint64_t max_live_parameters = UINT64_MAX;
  uint64_t prefetch_bucket = 1;  // elements; the first unit always goes
};

absl::StatusOr<ProcessEstimate> EstimateTorchRank(
    const std::vector<uint64_t>& unit_elems, int workers, int stage,
    Precision precision, const TorchZero3Keep& keep = {});

// The most elements gathered at once (prefetch included) when the units
// run forward then backward under `keep`'s rules.
double SimulatedGatheredPeak(const std::vector<uint64_t>& unit_elems,
                             const TorchZero3Keep& keep);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_TORCH_RANK_ESTIMATE_H_
