// Writes the full FP32 master weights of a cluster to disk, for comparing
// runs: <dir>/weights.f32 holds the whole padded flat space as raw
// little-endian floats (total_elems of them), <dir>/weights.json the layout
// needed to read it by tensor (common/weights_index.h).
//
//   RETURN_IF_ERROR(ExportWeights(addresses, layout, /*version=*/30, "out",
//                                 absl::Seconds(60)));
//
// Contracts: gathers at chunk version >= `version` (the servers wait for the
// last step's commits under `timeout`); both files are written to temporary
// names and renamed, so a reader never sees half a file. Needs 4 bytes of
// memory per flat element.
//
// With WeightsFileFormat::kSafetensors, <dir>/weights.safetensors is written
// too: the parameters as Hugging Face GPT-2 tensors (model/hf_gpt2.h), with
// metadata {"format": "pt", "zeroshard_step": "<version>"}.
#ifndef ZEROSHARD_TOOLS_TRAIN_WEIGHTS_EXPORT_H_
#define ZEROSHARD_TOOLS_TRAIN_WEIGHTS_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/client_options.h"
#include "common/layout.h"

namespace zeroshard {

enum class WeightsFileFormat { kF32, kSafetensors };

// `options`: how to reach the servers (credentials, run); its deadlines are
// replaced by `timeout`.
absl::Status ExportWeights(const std::vector<std::string>& servers,
                           const FlatLayout& layout, int64_t version,
                           const std::string& dir, absl::Duration timeout,
                           WeightsFileFormat format = WeightsFileFormat::kF32,
                           ShardClientOptions options = ShardClientOptions());

}  // namespace zeroshard

#endif  // ZEROSHARD_TOOLS_TRAIN_WEIGHTS_EXPORT_H_
