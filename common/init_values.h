// Deterministic initial weights: each element's value is a pure function of
// (seed, the tensor it belongs to, its offset inside that tensor), so any
// number of servers, each filling only its own range, produce the same model,
// and so does any worker count (which changes the unit padding).
//
// Rule by tensor, as the manifest states it (TensorSpec::init; the
// architecture chooses, model/arch.h): zeros, ones, or N(0, std /
// std_divisor) (GPT-2's residual projections have std_divisor
// sqrt(2 * layers), model/gpt_manifest.cc). No tensor name is read here.
// Padding is zero.
#ifndef ZEROSHARD_COMMON_INIT_VALUES_H_
#define ZEROSHARD_COMMON_INIT_VALUES_H_

#include <cstdint>

#include "common/layout.h"

namespace zeroshard {

// A standard normal sample that depends only on (seed, index).
float CounterNormal(uint64_t seed, uint64_t index);

// Fills out[0, range.size()) with the initial values of the flat range.
void FillInitialValues(const FlatLayout& layout, uint64_t seed, double std,
                       FlatRange range, float* out);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_INIT_VALUES_H_
