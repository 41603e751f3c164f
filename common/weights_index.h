// The sidecar of a raw FP32 weights file (the whole padded flat space as
// little-endian floats): the layout needed to read it by tensor, written by
// zeroshard-train --save_weights (weights.json beside weights.f32) and by
// zeroshard-ctl export --format=f32 (beside its --out):
//
//   {"format":"zeroshard-weights-v1","dtype":"float32","step":30,
//    "total_elems":N,"param_elems":P,"num_workers":2,"num_servers":2,
//    "tensors":[{"name":"wte.weight","shape":[256,64],"offset":0,
//                "numel":16384,"unit":"embedding"}, ...]}
#ifndef ZEROSHARD_COMMON_WEIGHTS_INDEX_H_
#define ZEROSHARD_COMMON_WEIGHTS_INDEX_H_

#include <cstdint>
#include <string>

#include "common/layout.h"

namespace zeroshard {

std::string WeightsIndexJson(const FlatLayout& layout, int64_t version);

// Where the sidecar of raw weights at `path` goes: "weights.f32" ->
// "weights.json", anything else -> path + ".json".
std::string WeightsIndexPath(const std::string& path);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_WEIGHTS_INDEX_H_
