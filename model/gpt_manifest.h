// The GPT-2 model manifest: tensor names and shapes as in Hugging Face GPT-2
// checkpoints, grouped into units "embedding", "block_0" ... "block_{L-1}",
// "final". The LM head is tied to the token embedding (wte), so it has no
// tensor of its own.
//
//   GptShape shape{.layers = 4, .heads = 4, .width = 128, .vocab = 256,
//                  .context = 128};
//   ASSIGN_OR_RETURN(ModelManifest m, MakeGptManifest(shape, /*partitions=*/2));
#ifndef ZEROSHARD_MODEL_GPT_MANIFEST_H_
#define ZEROSHARD_MODEL_GPT_MANIFEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "common/model_shape.h"

namespace zeroshard {

// GPT-2's shape is the configuration's (arch "gpt2").
using GptShape = ModelShape;

// Validates the shape: ValidateModelShape, and the arch is "gpt2".
absl::Status ValidateGptShape(const GptShape& shape);

// The manifest of a GPT-2 model with this shape.
absl::StatusOr<ModelManifest> MakeGptManifest(const GptShape& shape,
                                              uint32_t partition_count);

// Parameters of the model (tensor elements, without padding).
uint64_t GptParamCount(const GptShape& shape);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_GPT_MANIFEST_H_
