// The Llama model manifest (Llama 2/3, Qwen, Mistral, SmolLM's shape):
// Hugging Face's LlamaForCausalLM tensor names and shapes (nn.Linear's
// [out, in]), grouped into units "embedding", "block_0" ...
// "block_{L-1}", "final". A block: RMSNorm, q/k/v/o projections without
// biases (K key/value heads shared by H query heads), RMSNorm, a SwiGLU MLP
// (gate, up, down). The final unit holds the last RMSNorm and, unless the
// embeddings are tied, the head `lm_head.weight`.
//
//   ModelShape s{.layers = 4, .heads = 4, .width = 128, .vocab = 256,
//                .context = 128, .arch = "llama", .kv_heads = 2};
//   ASSIGN_OR_RETURN(ModelManifest m, MakeLlamaManifest(s, /*partitions=*/2));
#ifndef ZEROSHARD_MODEL_LLAMA_MANIFEST_H_
#define ZEROSHARD_MODEL_LLAMA_MANIFEST_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/layout.h"
#include "common/model_shape.h"

namespace zeroshard {

// A Llama shape with its defaults resolved: kv_heads (0: heads) and
// mlp_width (0: Meta's rule, 2/3 of 4C rounded up to a multiple of 256).
struct LlamaDims {
  int64_t layers, heads, kv_heads, head_dim, width, mlp_width, vocab, context;
  double rope_theta, norm_eps;
  bool tie_embeddings;
};
LlamaDims LlamaDimsOf(const ModelShape& shape);

// ValidateModelShape, the arch is "llama", kv_heads divides heads, the head
// dimension is even (the rotary pairs), rope_theta > 1 and norm_eps in
// (0, 1]: INVALID_ARGUMENT naming the zeroshard.model key.
absl::Status ValidateLlamaShape(const ModelShape& shape);

// The manifest. Init rules as Hugging Face's LlamaPreTrainedModel:
// N(0, init_std) for the projections, the embedding and the head; unit
// RMSNorm gains. Classes: the projections are matrices, the embedding and
// the head embeddings, the gains norms (not decayed by default, as Hugging
// Face's Trainer does).
absl::StatusOr<ModelManifest> MakeLlamaManifest(const ModelShape& shape,
                                                uint32_t partition_count);

// Parameters of the model (tensor elements, without padding).
uint64_t LlamaParamCount(const ModelShape& shape);

}  // namespace zeroshard

#endif  // ZEROSHARD_MODEL_LLAMA_MANIFEST_H_
